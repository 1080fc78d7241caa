module github.com/doublerun/doublerun/testdata/replicas/golang-migrate

go 1.26

require (
	github.com/golang-migrate/migrate/v4 v4.20.1
	github.com/lib/pq v1.12.3
)
