//! The scheduler extender's integration tests in one binary.

mod support;

mod http;
mod scheduler_config;
mod watch;
