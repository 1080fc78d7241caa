package stack

// Env returns the environment, as NAME=value pairs in os/exec's form, with
// which another process reaches this stack through the external provider:
// the provider itself and the five DSN variables. A command that starts
// other processes on this stack appends it to their environment;
// ExportLines writes the same pairs for a shell.
func (s *Stack) Env() []string {
	sess, tx := s.Session(), s.Transaction()
	env := []string{
		EnvProvider + "=" + string(ProviderExternal),
		EnvPostgresDSN + "=" + s.postgres.DSN,
		EnvSessionDSN + "=" + sess.DSN,
		EnvSessionAdminDSN + "=" + sess.AdminDSN,
		EnvTransactionDSN + "=" + tx.DSN,
		EnvTransactionAdminDSN + "=" + tx.AdminDSN,
	}
	if d, ok := s.backend.(interface{ sharedEnv() []string }); ok {
		env = append(env, d.sharedEnv()...)
	}
	return env
}
