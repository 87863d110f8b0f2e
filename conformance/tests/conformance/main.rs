//! The conformance crate's integration tests (simulator, suite, load test,
//! OpenAI SDK) in one binary.

mod support;

mod api;
mod behaviour;
mod conformance_load;
mod conformance_run;
mod openai_sdk;
mod schemas;
