//! The provisioner function (EventBridge schedule, every minute; its wake queue): adapters
//! from the environment, then one `nodewright::runtime::provisioner` per
//! invocation — with the disruption loop beside it when
//! `NODEWRIGHT_PROVISIONER_RUNS_DISRUPTION=true`, ending at the first quiet
//! tick when `NODEWRIGHT_END_WHEN_QUIET=true`. With
//! `NODEWRIGHT_WAKE_QUEUE_URL` its wake queue invokes it too, and each
//! invocation asks that queue for the next one.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodewright::runtime;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::init_tracing();
    let env = runtime::FunctionEnv::from_env()?;
    let ports = runtime::connect(&env, "provisioner").await?;
    let loops = runtime::Loops::of(&env);
    let wake = runtime::Wake::from_env(&env).await;
    lambda_runtime::run(service_fn(|event: LambdaEvent<serde_json::Value>| {
        runtime::provisioner(&ports, loops, wake.as_ref(), event)
    }))
    .await
}
