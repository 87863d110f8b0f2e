//! The benchmark's integration tests in one binary.

mod against_sim;
mod publish;
mod routing;
