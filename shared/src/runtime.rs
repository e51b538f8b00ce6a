//! Wiring for the Lambda functions: logging, and one function per handler
//! that the thin binaries call, on the real adapters [`crate::live`] builds
//! from the environment.

use lambda_runtime::LambdaEvent;
use tracing::{error, info, warn};

use crate::handlers::HandlerError;
use crate::handlers::config as config_loader;
use crate::handlers::config::ConfigReader;
use crate::handlers::disruption::{Disruption, DisruptionSettings, Memory};
use crate::handlers::interruption::{self as interruption_handler, InterruptionSettings, Record};
use crate::handlers::provisioner::{Provisioner, ProvisionerSettings};
use crate::handlers::state_change;
use crate::model::{SignedDuration, Timestamp};
use crate::ports::{Clock, PortSet, Store};

pub use crate::live::{FunctionEnv, LiveError, LivePorts, connect};

/// The provisioner stops this long before its Lambda deadline.
pub const DEADLINE_MARGIN: SignedDuration = SignedDuration::from_secs(5);

/// JSON logs inside Lambda (one object per line, for CloudWatch), text
/// elsewhere; `RUST_LOG` overrides the level. kube's own 5xx logging is
/// quieted: our retry layer reports what matters.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_client=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        builder.json().without_time().init();
    } else {
        builder.init();
    }
}

/// Assumed when the runtime gives no usable deadline (local emulators may
/// send none): the provisioner's deployed timeout.
pub const DEFAULT_INVOCATION: SignedDuration = SignedDuration::from_secs(60);

/// The Lambda deadline of an invocation.
fn deadline_of<T>(event: &LambdaEvent<T>) -> Timestamp {
    let now = Timestamp::now();
    match i64::try_from(event.context.deadline)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
    {
        Some(deadline) if deadline > now => deadline,
        _ => {
            warn!(
                deadline_ms = event.context.deadline,
                "the runtime gave no deadline ahead of now; assuming 60 s"
            );
            now + DEFAULT_INVOCATION
        }
    }
}

/// The provisioner function: one scheduled invocation, ticking until its
/// deadline minus a margin, holding the provisioner lease. With
/// `with_disruption` (`NODEWRIGHT_PROVISIONER_RUNS_DISRUPTION=true`, the
/// Terraform module's default) the disruption loop runs beside it in the
/// same invocation, under its own lease: one always-on invocation a minute
/// instead of two, half the Lambda bill. With a wake queue, however it
/// ended (quiet, at its deadline, another invocation holding the lease, or
/// failing), the invocation asks for the next one ([`wake_after`]).
pub async fn provisioner(
    ports: &LivePorts,
    loops: Loops,
    wake: Option<&Wake>,
    event: LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let deadline = deadline_of(&event);
    let remaining = deadline.duration_since(Timestamp::now());
    if remaining < DEADLINE_MARGIN + SignedDuration::from_secs(5) {
        warn!(
            remaining_s = remaining.as_secs_f64(),
            "the invocation has under 10 s left: give the provisioner a 60-s timeout"
        );
    }
    // An event source mapping's batch has records; a schedule's event not.
    let woken_by = if event.payload.get("Records").is_some() {
        "wake queue"
    } else {
        "schedule"
    };
    let holder = &event.context.request_id;
    let before = ports.store.requests();
    let ran = scheduled_invocation(ports, holder, deadline - DEADLINE_MARGIN, loops).await;
    let next = match wake {
        Some(wake) => Some(wake_after(ports, wake, holder).await),
        None => None,
    };
    let ticks = ran.map_err(|e| lambda_runtime::Error::from(e.to_string()))?;
    // What the running cost counts: in a quiet minute, no Scan of the
    // state table and a few GetItems per tick (see aws::dynamo's state view).
    let dynamodb = ports.store.requests() - before;
    info!(
        ?ticks,
        ?dynamodb,
        woken_by,
        ?next,
        remaining_at_start_s = remaining.as_secs_f64(),
        "provisioner invocation done"
    );
    // The heartbeat the "provisioner not running" alarm watches: three
    // minutes without a tick (no invocation, or none that got to tick).
    crate::handlers::metrics::emit(
        Timestamp::now().as_millisecond(),
        &[("Function", "provisioner".to_owned())].into(),
        &[crate::handlers::metrics::Metric::count(
            "ProvisionerTicks",
            ticks.provisioner as f64,
        )],
    );
    Ok(
        serde_json::json!({ "ticks": ticks.provisioner, "disruption_ticks": ticks.disruption, "dynamodb": dynamodb, "woken_by": woken_by }),
    )
}

/// The lease whose holder sends the next wake message. It is taken until
/// just before that message arrives, so while one message waits no
/// invocation sends another — however many invocations end meanwhile (the
/// minute's schedule, one that found the provisioner lease held) — and
/// the invocation the message wakes finds it free again. Never released
/// once the message is sent: it expires.
pub const WAKE_LEASE: &str = "wake";

/// The provisioner's wake queue and delay (`NODEWRIGHT_WAKE_QUEUE_URL`,
/// `NODEWRIGHT_QUIET_WAKE_SECONDS`).
#[derive(Debug, Clone)]
pub struct Wake {
    pub queue: crate::aws::WakeQueue,
    pub after: SignedDuration,
}

impl Wake {
    /// The function's wake queue, if its environment names one.
    pub async fn from_env(env: &FunctionEnv) -> Option<Wake> {
        let url = env.wake_queue_url.as_ref()?;
        let sdk = crate::aws::sdk_config(&crate::aws::ClientOptions::default()).await;
        Some(Wake {
            queue: crate::aws::WakeQueue::new(&sdk, url),
            after: env.quiet_wake,
        })
    }
}

/// What the end of an invocation did about the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeOutcome {
    /// A message invokes the provisioner the wake's delay from now.
    Sent,
    /// A message sent by another invocation is still waiting.
    AlreadyWaiting,
    /// The lease or the message failed (logged): the next scheduled
    /// invocation, within a minute, asks again.
    Failed(String),
}

/// Asks for the next provisioner invocation, `wake.after` from now,
/// unless a message sent earlier is still waiting ([`WAKE_LEASE`]). Never
/// fails the invocation: the schedule is the chain's backstop.
pub async fn wake_after<P: PortSet>(ports: &P, wake: &Wake, holder: &str) -> WakeOutcome {
    let now = ports.clock().now();
    // A second of slack (half the delay when shorter) for the clocks of
    // the sender, SQS and the woken invocation.
    let slack = SignedDuration::from_secs(1).min(wake.after / 2);
    let lease = crate::model::Lease {
        name: WAKE_LEASE.to_owned(),
        holder: holder.to_owned(),
        expires_at: now + wake.after - slack,
    };
    match ports.store().acquire_lease(&lease, now).await {
        Ok(false) => WakeOutcome::AlreadyWaiting,
        Err(e) => {
            warn!(error = %e, "could not take the wake lease; the schedule invokes the provisioner next");
            WakeOutcome::Failed(e.to_string())
        }
        Ok(true) => match wake.queue.send(wake.after, holder).await {
            Ok(()) => WakeOutcome::Sent,
            Err(e) => {
                warn!(error = %e, "could not send the wake message; the schedule invokes the provisioner next");
                // Let the next invocation to end try again.
                if let Err(e) = ports.store().release_lease(WAKE_LEASE, holder).await {
                    warn!(error = %e, "could not give back the wake lease; it expires");
                }
                WakeOutcome::Failed(e.to_string())
            }
        },
    }
}

/// When an interruption batch started a removal (or brought one's
/// deadline forward), invokes the provisioner at once through its wake
/// queue: on a quiet cluster no invocation is running to drain the node,
/// and the next wake may be seconds away of a two-minute notice. The kick
/// takes no wake lease — it adds one invocation, which then asks for the
/// next only if no wake waits, so the chain stays one. True: sent.
pub async fn kick_for_removals(
    wake: &Wake,
    report: &interruption_handler::BatchReport,
    sender: &str,
) -> bool {
    use crate::handlers::interruption::MessageOutcome;
    use crate::handlers::termination::Started;
    let acted = report.outcomes.iter().any(|(_, outcome)| {
        matches!(outcome, MessageOutcome::Removing(started) if started.iter().any(|s| {
            matches!(s, Started::New(_) | Started::Existing { tightened: true, .. })
        }))
    });
    if !acted {
        return false;
    }
    match wake.queue.send(SignedDuration::ZERO, sender).await {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %e, "could not invoke the provisioner at once; the next wake or schedule drains");
            false
        }
    }
}

/// What a scheduled invocation runs, from the function's environment
/// ([`FunctionEnv`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loops {
    /// The disruption loop runs beside the provisioner's.
    pub disruption: bool,
    /// Each loop ends at its first quiet tick instead of at the deadline
    /// (`NODEWRIGHT_END_WHEN_QUIET`): a fraction of the Lambda time, for up
    /// to a minute's reaction once the cluster was quiet.
    pub end_when_quiet: bool,
    /// Karpenter's gauges are published (`NODEWRIGHT_GAUGES`).
    pub gauges: bool,
}

impl Loops {
    /// The provisioner's loop alone, ticking until the deadline.
    pub const PROVISIONER: Loops = Loops {
        disruption: false,
        end_when_quiet: false,
        gauges: true,
    };
    /// Both loops, ticking until the deadline (the module's default).
    pub const BOTH: Loops = Loops {
        disruption: true,
        ..Loops::PROVISIONER
    };

    pub fn of(env: &FunctionEnv) -> Loops {
        Loops {
            disruption: env.provisioner_runs_disruption,
            end_when_quiet: env.end_when_quiet,
            gauges: env.gauges,
        }
    }
}

/// Ticks of one scheduled invocation, per loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ticks {
    pub provisioner: u64,
    /// `None`: the disruption loop did not run in this invocation.
    pub disruption: Option<u64>,
}

/// The provisioner's loop until `until`, and the disruption loop beside it
/// when asked, on any adapters (the functions' real ones, or a test's).
/// A failing disruption loop is logged and does not stop provisioning; a
/// failing provisioner loop fails the invocation once both have ended
/// (each releases its lease on its own way out). The two loops share one
/// task; the disruption decision's seconds of CPU run on a thread of their
/// own (`handlers::off_the_loop`), so the provisioner goes on ticking.
pub async fn scheduled_invocation<P: PortSet>(
    ports: P,
    holder: &str,
    until: Timestamp,
    loops: Loops,
) -> Result<Ticks, HandlerError> {
    let sleep = |d: SignedDuration| tokio::time::sleep(d.unsigned_abs());
    let settings = ProvisionerSettings {
        end_when_quiet: loops.end_when_quiet,
        gauges: loops.gauges,
        ..ProvisionerSettings::default()
    };
    let mut p = Provisioner::new(&ports, settings, holder)
        .with_config_reader(PROVISIONER_CONFIG.clone())
        .with_memory(PROVISIONER_MEMORY.clone());
    if !loops.disruption {
        let provisioner = p.run_until(until, sleep).await?;
        return Ok(Ticks {
            provisioner,
            disruption: None,
        });
    }
    let mut d = disruption_loop(&ports, holder, loops);
    let (provisioner, disruption) =
        tokio::join!(p.run_until(until, sleep), d.run_until(until, sleep));
    let disruption = disruption
        .inspect_err(|e| error!(error = %e, "the disruption loop stopped; provisioning went on"))
        .unwrap_or(0);
    Ok(Ticks {
        provisioner: provisioner?,
        disruption: Some(disruption),
    })
}

// One reader and one memory per container, whichever function runs the
// loop: a warm container re-reads only what changed and remembers when the
// next disruption decision is due, when instances were last compared with
// claims and when the gauges last went out.
static PROVISIONER_CONFIG: std::sync::LazyLock<ConfigReader> =
    std::sync::LazyLock::new(ConfigReader::new);
static DISRUPTION_CONFIG: std::sync::LazyLock<ConfigReader> =
    std::sync::LazyLock::new(ConfigReader::new);
static DISRUPTION_MEMORY: std::sync::LazyLock<Memory> = std::sync::LazyLock::new(Memory::default);
static PROVISIONER_MEMORY: std::sync::LazyLock<crate::handlers::provisioner::Memory> =
    std::sync::LazyLock::new(Default::default);

/// The disruption loop's settings for what the invocation runs.
fn disruption_settings(loops: Loops) -> DisruptionSettings {
    let settings = DisruptionSettings {
        gauges: loops.gauges,
        ..DisruptionSettings::default()
    };
    if loops.end_when_quiet {
        settings.ending_when_quiet()
    } else {
        settings
    }
}

/// The disruption loop with the container's reader and memory, whichever
/// function runs it.
fn disruption_loop<P: PortSet>(ports: P, holder: impl Into<String>, loops: Loops) -> Disruption<P> {
    Disruption::new(ports, disruption_settings(loops), holder)
        .with_config_reader(DISRUPTION_CONFIG.clone())
        .with_memory(DISRUPTION_MEMORY.clone())
}

/// The disruption function: one scheduled invocation, ticking until its
/// deadline minus a margin, holding the disruption lease (another
/// invocation still running makes this one exit at once). What the
/// container remembers between invocations (when the next decision is
/// due, the reasons already logged) lives as long as the container.
pub async fn disruption(
    ports: &LivePorts,
    loops: Loops,
    event: LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let deadline = deadline_of(&event);
    let until = deadline - DEADLINE_MARGIN;
    let remaining = deadline.duration_since(Timestamp::now());
    let mut d = disruption_loop(ports, event.context.request_id.clone(), loops);
    let before = ports.store.requests();
    let ticks = d
        .run_until(until, |t| tokio::time::sleep(t.unsigned_abs()))
        .await
        .map_err(|e| lambda_runtime::Error::from(e.to_string()))?;
    // What the running cost counts: in a quiet minute, no Scan of the
    // state table and a few GetItems per tick (see aws::dynamo's state view).
    let dynamodb = ports.store.requests() - before;
    info!(
        ticks,
        ?dynamodb,
        remaining_at_start_s = remaining.as_secs_f64(),
        "disruption invocation done"
    );
    Ok(serde_json::json!({ "ticks": ticks, "dynamodb": dynamodb }))
}

/// The state-change function: one EventBridge event. A malformed event is
/// logged and dropped (returning an error would only make Lambda retry
/// it); every other failure — an access error or an unreadable item as
/// much as a throttle — is returned as an error, so Lambda retries the
/// asynchronous invocation and, after its retries, keeps the event in the
/// failed-invocations queue (an alarm watches it).
pub async fn state_change(
    ports: &LivePorts,
    event: LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    state_change_outcome(state_change::handle(ports, &event.payload).await)
}

/// What the state-change function returns for a handler's result.
fn state_change_outcome(
    result: Result<state_change::StateChangeOutcome, HandlerError>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    match result {
        Ok(outcome) => Ok(serde_json::json!({ "outcome": format!("{outcome:?}") })),
        Err(HandlerError::Invalid(e)) => {
            error!(error = %e, "dropping an event that can never be handled");
            Ok(serde_json::json!({ "dropped": e }))
        }
        Err(e) => {
            error!(error = %e, kind = interruption_handler::failure_kind(&e), "state change failed; returning the error so Lambda retries it");
            Err(lambda_runtime::Error::from(e.to_string()))
        }
    }
}

/// Timeout of the interruption function as the Terraform module deploys
/// it (`interruption_timeout`): assumed when the runtime gives no usable
/// deadline.
pub const INTERRUPTION_TIMEOUT: SignedDuration = SignedDuration::from_secs(5);

/// The interruption function stops starting messages this long before its
/// deadline: a message it cannot finish goes back to the queue whole.
pub const INTERRUPTION_MARGIN: SignedDuration = SignedDuration::from_secs(1);

/// The interruption function: one SQS batch. Each message is handled,
/// ignored or dropped (a body that can never be read); every failure is
/// returned in the partial batch response, so SQS delivers it again after
/// the queue's visibility timeout (and to the dead-letter queue after
/// `maxReceiveCount` receives). The batch's removals are recorded and
/// their nodes tainted; the replacement, drain and termination are driven
/// by the scheduled loops, so the invocation returns in about a second.
pub async fn interruption(
    ports: &LivePorts,
    wake: Option<&Wake>,
    event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>,
) -> Result<aws_lambda_events::event::sqs::SqsBatchResponse, lambda_runtime::Error> {
    let now = Timestamp::now();
    let deadline = match i64::try_from(event.context.deadline)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
    {
        Some(d) if d > now => d,
        _ => now + INTERRUPTION_TIMEOUT,
    };
    let records: Vec<Record> = event
        .payload
        .records
        .into_iter()
        .map(|m| Record {
            message_id: m.message_id.unwrap_or_default(),
            body: m.body.unwrap_or_default(),
        })
        .collect();
    let options = InterruptionSettings::default();
    let mut response = aws_lambda_events::event::sqs::SqsBatchResponse::default();
    let config = match config_loader::load(&ports.store).await {
        Ok(c) => c,
        Err(e) => {
            // Nothing was handled: every message goes back.
            warn!(error = %e, "could not read the configuration; returning the batch");
            for r in &records {
                response.add_failure(r.message_id.clone());
            }
            return Ok(response);
        }
    };
    let settings = config.settings.clone();
    let report = interruption_handler::handle_batch(
        ports,
        &config,
        &settings,
        &options,
        &records,
        deadline - INTERRUPTION_MARGIN,
    )
    .await
    .map_err(|e| lambda_runtime::Error::from(e.to_string()))?;
    for id in &report.failures {
        response.add_failure(id.clone());
    }
    let kicked = match wake {
        Some(wake) => kick_for_removals(wake, &report, &event.context.request_id).await,
        None => false,
    };
    info!(
        messages = records.len(),
        failures = report.failures.len(),
        kicked,
        remaining_s = deadline.duration_since(Timestamp::now()).as_secs_f64(),
        "interruption invocation done"
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::{FailureKind, ServiceError, StoreError};

    /// A state change whose handling failed for any reason but an
    /// unreadable event is an invocation error (Lambda retries it, then
    /// keeps it in the failed-invocations queue); before, an access error
    /// counted as "can never succeed" and the event was dropped.
    #[test]
    fn a_state_change_is_dropped_only_when_it_cannot_be_read() {
        let denied = HandlerError::Store(StoreError::Service(ServiceError::new(
            FailureKind::AccessDenied,
            "GetItem: AccessDeniedException: not allowed",
        )));
        assert!(state_change_outcome(Err(denied)).is_err());
        let unreadable = HandlerError::Store(StoreError::invalid("claim#a", "unreadable body"));
        assert!(state_change_outcome(Err(unreadable)).is_err());
        let throttled = HandlerError::Store(StoreError::Service(ServiceError::new(
            FailureKind::Throttled,
            "Scan: ThrottlingException",
        )));
        assert!(state_change_outcome(Err(throttled)).is_err());
        let malformed = HandlerError::Invalid("not an EventBridge event".into());
        assert!(state_change_outcome(Err(malformed)).is_ok());
    }
}
