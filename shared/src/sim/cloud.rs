//! EC2 in memory: launches that honour the client token, capacity that can
//! run out on demand, instances that start, boot and stop on the simulated
//! clock, and the state-change events EC2 would publish.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use super::clock::SimClock;
use crate::ports::{
    Clock, Cloud, CloudCatalog, CloudError, Instance, InstanceState, LaunchRequest, Launched, OfferingKey, PricedOffering,
    SignedDuration, Timestamp,
};
use crate::scheduling::labels::CAPACITY_TYPE_SPOT;

/// How long things take in the simulated EC2.
#[derive(Debug, Clone, Copy)]
pub struct Delays {
    /// pending → running.
    pub start: SignedDuration,
    /// shutting-down → terminated.
    pub shutdown: SignedDuration,
}

impl Default for Delays {
    fn default() -> Self {
        Delays {
            start: SignedDuration::from_secs(5),
            shutdown: SignedDuration::from_secs(10),
        }
    }
}

/// One simulated instance and the request that launched it.
#[derive(Debug, Clone)]
pub struct SimInstance {
    pub instance: Instance,
    pub request: LaunchRequest,
    /// When the next state transition is due.
    pub next_transition: Option<Timestamp>,
    /// When EC2 takes the instance back (after a spot interruption warning,
    /// or at a scheduled change's start).
    pub reclaim_at: Option<Timestamp>,
}

#[derive(Debug)]
struct State {
    catalog: Arc<CloudCatalog>,
    delays: Delays,
    instances: BTreeMap<String, SimInstance>,
    tokens: HashMap<String, String>,
    no_capacity: BTreeSet<OfferingKey>,
    /// State-change notifications not yet delivered: (due, instance, state).
    notifications: Vec<(Timestamp, String, InstanceState)>,
    launches: usize,
    next_id: u64,
    /// The interruption queue: EventBridge events EC2 and AWS Health
    /// publish, as SQS would deliver them: (visible from, message id, body).
    queue: Vec<(Timestamp, String, String)>,
    next_message: u64,
    /// The cluster's Kubernetes version: which AMI NodeClasses resolve to.
    kubernetes_version: String,
}

#[derive(Debug, Clone)]
pub struct SimCloud {
    state: Arc<Mutex<State>>,
    clock: SimClock,
}

impl SimCloud {
    pub fn new(catalog: CloudCatalog, clock: SimClock) -> Self {
        SimCloud {
            state: Arc::new(Mutex::new(State {
                catalog: Arc::new(catalog),
                delays: Delays::default(),
                instances: BTreeMap::new(),
                tokens: HashMap::new(),
                no_capacity: BTreeSet::new(),
                notifications: Vec::new(),
                launches: 0,
                next_id: 1,
                queue: Vec::new(),
                next_message: 1,
                kubernetes_version: DEFAULT_KUBERNETES_VERSION.to_owned(),
            })),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_delays(&self, delays: Delays) {
        self.lock().delays = delays;
    }

    /// The cluster moves to another Kubernetes version: every NodeClass now
    /// resolves to that version's AMI (what an EKS upgrade does to the
    /// `@latest` aliases), so nodes on the old one drift.
    pub fn set_kubernetes_version(&self, version: &str) {
        self.lock().kubernetes_version = version.to_owned();
    }

    pub fn kubernetes_version(&self) -> String {
        self.lock().kubernetes_version.clone()
    }

    /// The AMI NodeClasses resolve to now.
    pub fn image_id(&self) -> String {
        image_for(&self.lock().kubernetes_version)
    }

    /// From now on, launches of this offering fail for lack of capacity.
    pub fn remove_capacity(&self, offering: OfferingKey) {
        self.lock().no_capacity.insert(offering);
    }

    pub fn restore_capacity(&self, offering: &OfferingKey) {
        self.lock().no_capacity.remove(offering);
    }

    /// Successful CreateFleet calls that made a new instance.
    pub fn launches(&self) -> usize {
        self.lock().launches
    }

    /// Every instance ever launched, terminated ones included.
    pub fn all_instances(&self) -> Vec<SimInstance> {
        self.lock().instances.values().cloned().collect()
    }

    /// Moves instances through their states; queues the notifications.
    pub fn advance(&self, now: Timestamp) {
        let mut s = self.lock();
        let mut queued = Vec::new();
        let shutdown = s.delays.shutdown;
        for i in s.instances.values_mut() {
            if let Some(at) = i.reclaim_at.filter(|t| *t <= now) {
                i.reclaim_at = None;
                if !i.instance.state.is_gone_or_going() {
                    i.instance.state = InstanceState::ShuttingDown;
                    i.next_transition = Some(at + shutdown);
                    queued.push((at, i.instance.id.clone(), InstanceState::ShuttingDown));
                    continue;
                }
            }
            let Some(due) = i.next_transition.filter(|t| *t <= now) else { continue };
            let next = match i.instance.state {
                InstanceState::Pending => Some((InstanceState::Running, None)),
                InstanceState::ShuttingDown => Some((InstanceState::Terminated, None)),
                _ => None,
            };
            i.next_transition = None;
            if let Some((state, after)) = next {
                i.instance.state = state;
                i.next_transition = after;
                queued.push((due, i.instance.id.clone(), state));
            }
        }
        s.notifications.extend(queued);
    }

    /// The earliest pending state transition.
    pub fn next_due(&self) -> Option<Timestamp> {
        let s = self.lock();
        s.instances
            .values()
            .flat_map(|i| [i.next_transition, i.reclaim_at])
            .flatten()
            .chain(s.notifications.iter().map(|n| n.0))
            .chain(s.queue.iter().map(|m| m.0))
            .min()
    }

    /// State-change notifications due by `now`, oldest first.
    pub fn take_notifications(&self, now: Timestamp) -> Vec<(Timestamp, String, InstanceState)> {
        let mut s = self.lock();
        let (due, later): (Vec<_>, Vec<_>) = s.notifications.drain(..).partition(|(t, _, _)| *t <= now);
        s.notifications = later;
        due
    }

    /// An instance stops or is terminated from outside (spot reclaim, a user).
    pub fn external_state_change(&self, instance_id: &str, state: InstanceState) {
        let now = self.clock.now();
        let mut s = self.lock();
        let shutdown = s.delays.shutdown;
        if let Some(i) = s.instances.get_mut(instance_id) {
            i.instance.state = state;
            i.next_transition = (state == InstanceState::ShuttingDown).then_some(now + shutdown);
            s.notifications.push((now, instance_id.to_owned(), state));
        }
    }

    /// EC2 warns that it takes a spot instance back in two minutes (the
    /// warning goes to the interruption queue; the instance shuts down when
    /// the notice runs out). False when the instance is not live spot.
    pub fn interrupt_spot(&self, instance_id: &str) -> bool {
        let now = self.clock.now();
        let live_spot = self.lock().instances.get(instance_id).is_some_and(|i| {
            i.instance.capacity_type == CAPACITY_TYPE_SPOT && !i.instance.state.is_gone_or_going()
        });
        if !live_spot {
            return false;
        }
        let detail = serde_json::json!({"instance-id": instance_id, "instance-action": "terminate"});
        self.publish("EC2 Spot Instance Interruption Warning", "aws.ec2", instance_id, detail, now);
        if let Some(i) = self.lock().instances.get_mut(instance_id) {
            i.reclaim_at = Some(now + SignedDuration::from_mins(2));
        }
        true
    }

    /// EC2 recommends rebalancing away from an instance (no deadline).
    pub fn recommend_rebalance(&self, instance_id: &str) -> bool {
        let now = self.clock.now();
        if !self.lock().instances.get(instance_id).is_some_and(|i| !i.instance.state.is_gone_or_going()) {
            return false;
        }
        self.publish("EC2 Instance Rebalance Recommendation", "aws.ec2", instance_id, serde_json::json!({"instance-id": instance_id}), now);
        true
    }

    /// AWS Health schedules maintenance of instances at `start`, when they are taken back.
    pub fn schedule_change(&self, instance_ids: &[String], start: Timestamp) {
        let now = self.clock.now();
        let live: Vec<String> = {
            let mut s = self.lock();
            instance_ids
                .iter()
                .filter(|id| {
                    s.instances.get_mut(*id).filter(|i| !i.instance.state.is_gone_or_going()).map(|i| i.reclaim_at = Some(start)).is_some()
                })
                .cloned()
                .collect()
        };
        if live.is_empty() {
            return;
        }
        let entities: Vec<serde_json::Value> = live.iter().map(|id| serde_json::json!({"entityValue": id})).collect();
        let detail = serde_json::json!({
            "service": "EC2", "eventTypeCategory": "scheduledChange", "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "startTime": jiff::fmt::rfc2822::to_string(&start.to_zoned(jiff::tz::TimeZone::UTC)).unwrap_or_default(),
            "affectedEntities": entities,
        });
        self.publish("AWS Health Event", "aws.health", &live[0], detail, now);
    }

    /// Puts an arbitrary message on the interruption queue (foreign or malformed ones, in tests).
    pub fn enqueue(&self, body: String) {
        let now = self.clock.now();
        let mut s = self.lock();
        let id = format!("msg-{:06}", s.next_message);
        s.next_message += 1;
        s.queue.push((now, id, body));
    }

    fn publish(&self, detail_type: &str, source: &str, instance_id: &str, detail: serde_json::Value, at: Timestamp) {
        let region = self.lock().catalog.region.clone();
        let event = serde_json::json!({
            "version": "0",
            "id": format!("sim-{}-{}", instance_id, at.as_millisecond()),
            "detail-type": detail_type,
            "source": source,
            "account": "000000000000",
            "time": at.to_string(),
            "region": region,
            "resources": [format!("arn:aws:ec2:{region}:000000000000:instance/{instance_id}")],
            "detail": detail
        });
        self.enqueue(event.to_string());
    }

    /// Interruption-queue messages visible by `now`: (message id, body), oldest first.
    pub fn take_messages(&self, now: Timestamp) -> Vec<(String, String)> {
        let mut s = self.lock();
        let (due, later): (Vec<_>, Vec<_>) = s.queue.drain(..).partition(|(t, _, _)| *t <= now);
        s.queue = later;
        due.into_iter().map(|(_, id, body)| (id, body)).collect()
    }

    /// Puts messages back (a failed batch item), visible again after `delay`.
    pub fn requeue(&self, messages: Vec<(String, String)>, delay: SignedDuration) {
        let at = self.clock.now() + delay;
        self.lock().queue.extend(messages.into_iter().map(|(id, body)| (at, id, body)));
    }

    /// EC2's EventBridge event for a state change.
    pub fn state_change_event(&self, instance_id: &str, state: InstanceState, at: Timestamp) -> serde_json::Value {
        let region = self.lock().catalog.region.clone();
        let state = serde_json::to_value(state).unwrap_or_default();
        serde_json::json!({
            "version": "0",
            "id": format!("sim-{instance_id}-{}", at.as_millisecond()),
            "detail-type": "EC2 Instance State-change Notification",
            "source": "aws.ec2",
            "account": "000000000000",
            "time": at.to_string(),
            "region": region,
            "resources": [format!("arn:aws:ec2:{region}:000000000000:instance/{instance_id}")],
            "detail": {"instance-id": instance_id, "state": state}
        })
    }
}

/// The Kubernetes version a simulated cluster starts at.
pub const DEFAULT_KUBERNETES_VERSION: &str = "1.30";

/// The simulated EKS-optimized AMI of a Kubernetes version.
pub fn image_for(version: &str) -> String {
    format!("ami-eks-{}", version.replace('.', "-"))
}

impl Cloud for SimCloud {
    async fn catalog(&self) -> Result<Arc<CloudCatalog>, CloudError> {
        Ok(self.lock().catalog.clone())
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<Launched, CloudError> {
        let now = self.clock.now();
        let mut s = self.lock();
        if let Some(id) = s.tokens.get(&request.client_token)
            && let Some(i) = s.instances.get(id)
        {
            return Ok(Launched { instance: i.instance.clone(), unavailable: vec![] });
        }
        if request.options.is_empty() {
            return Err(CloudError::Invalid(format!("nodeclaim {}: no launch options", request.claim_id)));
        }
        // Spot when any option is spot (as Karpenter asks CreateFleet), then
        // cheapest first: price-capacity-optimized and lowest-price agree here.
        let spot = request.options.iter().any(|o| o.capacity_type == CAPACITY_TYPE_SPOT);
        let mut options: Vec<&PricedOffering> =
            request.options.iter().filter(|o| (o.capacity_type == CAPACITY_TYPE_SPOT) == spot).collect();
        options.sort_by(|a, b| a.price.total_cmp(&b.price));
        let mut unavailable = Vec::new();
        let mut chosen = None;
        for o in options {
            let key = OfferingKey { capacity_type: o.capacity_type.clone(), instance_type: o.instance_type.clone(), zone: o.zone.clone() };
            let sold = s.catalog.offerings.iter().any(|c| {
                c.instance_type == o.instance_type && c.zone == o.zone && c.capacity_type == o.capacity_type
            });
            if !sold {
                return Err(CloudError::Invalid(format!(
                    "InvalidParameterValue: {} is not offered as {} in {}",
                    o.instance_type, o.capacity_type, o.zone
                )));
            }
            if s.no_capacity.contains(&key) {
                unavailable.push(key);
                continue;
            }
            chosen = Some(o.clone());
            break;
        }
        let Some(o) = chosen else {
            return Err(CloudError::InsufficientCapacity {
                offerings: unavailable,
                message: "InsufficientInstanceCapacity: we currently do not have sufficient capacity".to_owned(),
            });
        };
        let n = s.next_id;
        s.next_id += 1;
        s.launches += 1;
        let id = format!("i-{:017x}", 0x0a1b_0000_0000_0000u64 + n);
        let instance = Instance {
            id: id.clone(),
            instance_type: o.instance_type.clone(),
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.clone(),
            state: InstanceState::Pending,
            launched_at: now,
            claim_id: Some(request.claim_id.clone()),
            pool: Some(request.pool.clone()),
            provider_id: format!("aws:///{}/{}", o.zone, id),
            price: o.price,
            image_id: Some(image_for(&s.kubernetes_version)),
            subnet_id: None,
            security_group_ids: Vec::new(),
        };
        let start = s.delays.start;
        s.instances.insert(
            id.clone(),
            SimInstance { instance: instance.clone(), request: request.clone(), next_transition: Some(now + start), reclaim_at: None },
        );
        s.tokens.insert(request.client_token.clone(), id);
        s.notifications.push((now, instance.id.clone(), InstanceState::Pending));
        Ok(Launched { instance, unavailable })
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        for id in instance_ids {
            let state = self.lock().instances.get(id).map(|i| i.instance.state);
            if state.is_some_and(|s| !s.is_gone_or_going()) {
                self.external_state_change(id, InstanceState::ShuttingDown);
            }
        }
        Ok(())
    }

    async fn resolved_class(&self, _class: &crate::config::NodeClass) -> Result<crate::disruption::ResolvedClass, CloudError> {
        Ok(crate::disruption::ResolvedClass { image_ids: vec![self.image_id()], ..Default::default() })
    }

    async fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        Ok(self
            .lock()
            .instances
            .values()
            .filter(|i| i.instance.state != InstanceState::Terminated)
            .map(|i| i.instance.clone())
            .collect())
    }
}
