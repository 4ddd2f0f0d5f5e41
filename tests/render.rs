//! End-to-end stacks-pprof and stacks-trace: real clients open what we write.
