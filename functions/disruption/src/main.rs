//! The disruption function (EventBridge schedule, every minute): adapters
//! from the environment, then one `nodewright::runtime::disruption` per
//! invocation, ticking inside it and holding the `disruption` lease.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodewright::runtime;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::init_tracing();
    let ports = runtime::connect(&runtime::FunctionEnv::from_env()?, "disruption").await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        runtime::disruption(&ports, event)
    }))
    .await
}
