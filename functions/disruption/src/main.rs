//! The disruption function (EventBridge schedule, every minute): adapters
//! from the environment, then one `nodewright::runtime::disruption` per
//! invocation, ticking inside it and holding the `disruption` lease.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodewright::runtime;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::init_tracing();
    let env = runtime::FunctionEnv::from_env()?;
    let ports = runtime::connect(&env, "disruption").await?;
    let loops = runtime::Loops::of(&env);
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        runtime::disruption(&ports, loops, event)
    }))
    .await
}
