//! The interruption function (SQS event source mapping, batch size 10,
//! `ReportBatchItemFailures`): adapters from the environment, then one
//! `nodewright::runtime::interruption` per batch.

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodewright::runtime;

#[tokio::main]
async fn main() -> Result<(), Error> {
    runtime::init_tracing();
    let ports = runtime::connect(&runtime::FunctionEnv::from_env()?, "interruption").await?;
    lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| {
        runtime::interruption(&ports, event)
    }))
    .await
}
