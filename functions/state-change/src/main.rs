//! The state-change function (EventBridge rule on EC2 Instance State-change
//! Notification): adapters from the environment, then one
//! `nodewright::runtime::state_change` per event.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodewright::runtime;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::init_tracing();
    let ports = runtime::connect(&runtime::FunctionEnv::from_env()?, "state-change").await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        runtime::state_change(&ports, event)
    }))
    .await
}
