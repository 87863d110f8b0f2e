//! Shared helpers of the flashload integration tests.
pub mod fake_ecr;
pub mod registry;
pub mod relay;
pub mod token_front;
