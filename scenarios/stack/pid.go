package stack

import "fmt"

// PID returns the operating-system process ID of the server behind the
// endpoint called name ("postgres" or a bouncer's name), so that a
// benchmark can read its CPU time from /proc. For Postgres it is the
// postmaster, the parent of every backend. Only the native provider runs
// its servers as local processes; the others return ErrNotSupported.
func (s *Stack) PID(name string) (int, error) {
	var n node
	if name == PostgresName {
		n = s.pgNode
	} else {
		b, err := s.bouncer(name)
		if err != nil {
			return 0, err
		}
		n = b.node
	}
	p, ok := n.(*process)
	if !ok {
		return 0, fmt.Errorf("pid of %s: %w; use the native provider", name, ErrNotSupported)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0, fmt.Errorf("pid of %s: not running", name)
	}
	return p.cmd.Process.Pid, nil
}
