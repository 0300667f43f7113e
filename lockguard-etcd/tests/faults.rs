//! Fault tests on etcd.
