// Package e2e owns sluice's end-to-end tests: the real `sluice run` binary, built once per test
// run, runs as one or more subprocesses against a real Apache Kafka broker (kafkatest.Brokers)
// or an in-process kfake cluster (kafkatest.Fake), is killed with SIGKILL and restarted, loses
// its state dir, and is fed bad records; the orders workload's verifier then demands that every
// customer's total is exact and that no transaction is left open.
//
// The package has no non-test code beyond this comment.
package e2e
