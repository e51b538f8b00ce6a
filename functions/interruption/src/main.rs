//! The interruption function (SQS event source mapping, batch size 10,
//! `ReportBatchItemFailures`): adapters from the environment, then one
//! `nodewright::runtime::interruption` per batch; a batch that starts a
//! removal invokes the provisioner at once through its wake queue.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodewright::runtime;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::init_tracing();
    let env = runtime::FunctionEnv::from_env()?;
    let ports = runtime::connect(&env, "interruption").await?;
    // The provisioner's wake queue: a batch that starts a removal invokes
    // the provisioner at once to drain it.
    let wake = runtime::Wake::from_env(&env).await;
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| {
        runtime::interruption(&ports, wake.as_ref(), event)
    }))
    .await
}
