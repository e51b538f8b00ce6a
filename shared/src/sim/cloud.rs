//! EC2 in memory: launches that honour the client token, spot capacity
//! pools of finite depth chosen price-capacity-optimized (on-demand at the
//! lowest price), capacity that can run out on demand, instances that
//! start, boot and stop on the simulated clock, and the state-change events
//! EC2 would publish.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::clock::SimClock;
use super::pools::{self, PoolDepths, SpotPools};
use crate::cloud::ownership;
use crate::cloud::{CapacityReservation, ReservationType};
use crate::model::{
    CloudCatalog, Instance, InstanceHealth, InstanceState, LaunchRequest, LaunchTemplate, Launched,
    OfferingKey, PricedOffering, SignedDuration, StatusCheck, Timestamp,
};
use crate::ports::{Clock, Cloud, CloudError};
use crate::scheduling::labels::{CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT};

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
    /// The launch request (a neighbour's is a stand-in: no options).
    pub request: LaunchRequest,
    /// Its EC2 tags: ours carry [`ownership::resource_tags`] of
    /// [`SIM_CLUSTER`]; a neighbour's are whatever it was given.
    pub tags: BTreeMap<String, String>,
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
    /// What the catalog sells, to check requests against.
    sold: HashSet<OfferingKey>,
    no_capacity: BTreeSet<OfferingKey>,
    /// Spot capacity: each pool's depth and what live instances hold.
    spot_pools: SpotPools,
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
    /// Ids a terminate call named that are not ours (a neighbour's, or
    /// unknown): skipped, as EC2's adapter skips them, and remembered so a
    /// test can say nobody even asked.
    foreign_terminations: Vec<String>,
    /// Launch templates by name: ours (one per NodeClass, NodePool and
    /// AMI, made by the first launch that needs it, as EC2's adapter makes
    /// one per distinct content) and any a test adds for a neighbour.
    templates: BTreeMap<String, SimTemplate>,
    /// Template names a delete call named that were not ours: skipped.
    foreign_template_deletes: Vec<String>,
    next_template: u64,
    /// Capacity reservations by id; `available` is derived, as EC2 does:
    /// `total` minus the live instances running in it.
    reservations: BTreeMap<String, CapacityReservation>,
    /// What EC2's status checks say of an instance (DescribeInstanceStatus):
    /// its failed checks and scheduled events; none listed: healthy.
    health: BTreeMap<String, Vec<StatusCheck>>,
}

/// One simulated launch template and its tags.
#[derive(Debug, Clone)]
pub struct SimTemplate {
    pub template: LaunchTemplate,
    pub tags: BTreeMap<String, String>,
}

/// The cluster name the simulated EC2 tags our instances with.
pub const SIM_CLUSTER: &str = "simulated";

#[derive(Debug, Clone)]
pub struct SimCloud {
    state: Arc<Mutex<State>>,
    clock: SimClock,
}

impl SimCloud {
    pub fn new(catalog: CloudCatalog, clock: SimClock) -> Self {
        let sold = catalog.offerings.iter().map(offering_key).collect();
        SimCloud {
            state: Arc::new(Mutex::new(State {
                catalog: Arc::new(catalog),
                sold,
                delays: Delays::default(),
                instances: BTreeMap::new(),
                tokens: HashMap::new(),
                no_capacity: BTreeSet::new(),
                spot_pools: SpotPools::default(),
                notifications: Vec::new(),
                launches: 0,
                next_id: 1,
                queue: Vec::new(),
                next_message: 1,
                kubernetes_version: DEFAULT_KUBERNETES_VERSION.to_owned(),
                foreign_terminations: Vec::new(),
                templates: BTreeMap::new(),
                foreign_template_deletes: Vec::new(),
                next_template: 1,
                reservations: BTreeMap::new(),
                health: BTreeMap::new(),
            })),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or replaces) a capacity reservation; its `total` is what it
    /// holds, `available` is ignored (derived from the live instances in it).
    pub fn add_reservation(&self, reservation: CapacityReservation) {
        self.lock()
            .reservations
            .insert(reservation.id.clone(), reservation);
    }

    /// Live instances in each reservation, by id.
    pub fn reservation_use(&self) -> BTreeMap<String, u32> {
        self.lock().reservation_use()
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

    /// How deep the spot pools are from now on (instances already running
    /// keep holding their units). Default: [`PoolDepths::default`].
    pub fn set_spot_pools(&self, depths: PoolDepths) {
        self.lock().spot_pools.set_depths(depths);
    }

    /// What spot launches could still take from a pool.
    pub fn spot_remaining(&self, pool: &OfferingKey) -> u64 {
        self.lock().spot_pools.remaining(pool)
    }

    /// Successful CreateFleet calls that made a new instance.
    pub fn launches(&self) -> usize {
        self.lock().launches
    }

    /// The region of the catalog (what node names are made of).
    pub fn catalog_region(&self) -> String {
        self.lock().catalog.region.clone()
    }

    /// Every instance of ours ever launched, terminated ones included.
    pub fn all_instances(&self) -> Vec<SimInstance> {
        self.lock()
            .instances
            .values()
            .filter(|i| ownership::is_ours(&i.tags, SIM_CLUSTER))
            .cloned()
            .collect()
    }

    /// An instance someone else runs in the same account — a managed node
    /// group's, a Karpenter's, another cluster's — with these tags,
    /// running from now. It moves, is interrupted and publishes state
    /// changes like ours, but is never listed as ours nor terminated by us
    /// (unless its tags say it is ours).
    pub fn add_neighbour(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: &str,
        tags: BTreeMap<String, String>,
    ) -> Instance {
        let now = self.clock.now();
        let mut s = self.lock();
        let n = s.next_id;
        s.next_id += 1;
        let id = format!("i-{:017x}", 0x0f0e_0000_0000_0000u64 + n);
        let instance = Instance {
            id: id.clone(),
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
            capacity_type: capacity_type.to_owned(),
            state: InstanceState::Running,
            launched_at: now,
            claim_id: None,
            pool: None,
            node_class: None,
            provider_id: format!("aws:///{zone}/{id}"),
            price: 0.0,
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
            capacity_reservation_id: None,
            capacity_reservation_type: None,
            capacity_reservation_interruptible: false,
        };
        let request = LaunchRequest {
            claim_id: String::new(),
            client_token: String::new(),
            pool: String::new(),
            node_class: None,
            node_class_spec: None,
            options: Vec::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            kubelet: Default::default(),
            reservations: Vec::new(),
        };
        if let Some(pool) = spot_pool(&instance) {
            s.spot_pools.take(&pool);
        }
        s.instances.insert(
            id,
            SimInstance {
                instance: instance.clone(),
                request,
                tags,
                next_transition: None,
                reclaim_at: None,
            },
        );
        instance
    }

    /// The instances of the account that are not ours, as they are now.
    pub fn neighbours(&self) -> Vec<SimInstance> {
        self.lock()
            .instances
            .values()
            .filter(|i| !ownership::is_ours(&i.tags, SIM_CLUSTER))
            .cloned()
            .collect()
    }

    /// A launch template of someone else's (a node group's, a Karpenter's,
    /// another cluster's) with these tags, created now.
    pub fn add_neighbour_template(&self, name: &str, tags: BTreeMap<String, String>) {
        let now = self.clock.now();
        let mut s = self.lock();
        s.add_template(name, tags, now);
    }

    /// Every launch template of the account (ours and neighbours'), by name.
    pub fn all_templates(&self) -> Vec<SimTemplate> {
        self.lock().templates.values().cloned().collect()
    }

    /// Template names a delete call named that were not ours, in order.
    pub fn foreign_template_deletes(&self) -> Vec<String> {
        self.lock().foreign_template_deletes.clone()
    }

    /// Ids a terminate call named that were not ours, in order.
    pub fn foreign_terminations(&self) -> Vec<String> {
        self.lock().foreign_terminations.clone()
    }

    /// Moves instances through their states; queues the notifications.
    pub fn advance(&self, now: Timestamp) {
        let mut s = self.lock();
        let mut queued = Vec::new();
        let mut freed = Vec::new();
        let shutdown = s.delays.shutdown;
        // A capacity block's instances go back to EC2 at its end.
        let ended: BTreeMap<String, Timestamp> = s
            .reservations
            .values()
            .filter(|r| r.reservation_type == ReservationType::CapacityBlock)
            .filter_map(|r| Some((r.id.clone(), r.end_time?)))
            .collect();
        for i in s.instances.values_mut() {
            if i.reclaim_at.is_none()
                && !i.instance.state.is_gone_or_going()
                && let Some(end) = i
                    .instance
                    .capacity_reservation_id
                    .as_ref()
                    .and_then(|id| ended.get(id))
            {
                i.reclaim_at = Some(*end);
            }
            if let Some(at) = i.reclaim_at.filter(|t| *t <= now) {
                i.reclaim_at = None;
                if !i.instance.state.is_gone_or_going() {
                    i.instance.state = InstanceState::ShuttingDown;
                    freed.extend(spot_pool(&i.instance));
                    i.next_transition = Some(at + shutdown);
                    queued.push((at, i.instance.id.clone(), InstanceState::ShuttingDown));
                    continue;
                }
            }
            let Some(due) = i.next_transition.filter(|t| *t <= now) else {
                continue;
            };
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
        for pool in &freed {
            s.spot_pools.give_back(pool);
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
        let (due, later): (Vec<_>, Vec<_>) =
            s.notifications.drain(..).partition(|(t, _, _)| *t <= now);
        s.notifications = later;
        due
    }

    /// An instance stops or is terminated from outside (spot reclaim, a user).
    pub fn external_state_change(&self, instance_id: &str, state: InstanceState) {
        let now = self.clock.now();
        let mut s = self.lock();
        let shutdown = s.delays.shutdown;
        if let Some(i) = s.instances.get_mut(instance_id) {
            let was_live = !i.instance.state.is_gone_or_going();
            i.instance.state = state;
            i.next_transition = (state == InstanceState::ShuttingDown).then_some(now + shutdown);
            let pool = spot_pool(&i.instance);
            s.notifications.push((now, instance_id.to_owned(), state));
            if let Some(pool) = pool {
                s.account_for_change(&pool, was_live, !state.is_gone_or_going());
            }
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
        let detail =
            serde_json::json!({"instance-id": instance_id, "instance-action": "terminate"});
        self.publish(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            instance_id,
            detail,
            now,
        );
        if let Some(i) = self.lock().instances.get_mut(instance_id) {
            i.reclaim_at = Some(now + SignedDuration::from_mins(2));
        }
        true
    }

    /// EC2 recommends rebalancing away from an instance (no deadline).
    pub fn recommend_rebalance(&self, instance_id: &str) -> bool {
        let now = self.clock.now();
        if self
            .lock()
            .instances
            .get(instance_id)
            .is_none_or(|i| i.instance.state.is_gone_or_going())
        {
            return false;
        }
        self.publish(
            "EC2 Instance Rebalance Recommendation",
            "aws.ec2",
            instance_id,
            serde_json::json!({"instance-id": instance_id}),
            now,
        );
        true
    }

    /// AWS Health schedules maintenance of instances at `start`, when they are taken back.
    /// EC2 reports `check` for the instance from now on (a failed status
    /// check, or a scheduled event), beside what it already reports; false
    /// when the instance is unknown or gone.
    pub fn impair(&self, instance_id: &str, check: StatusCheck) -> bool {
        let mut s = self.lock();
        let live = s
            .instances
            .get(instance_id)
            .is_some_and(|i| !i.instance.state.is_gone_or_going());
        if live {
            s.health
                .entry(instance_id.to_owned())
                .or_default()
                .push(check);
        }
        live
    }

    /// The instance's checks pass again and its events are over.
    pub fn recover(&self, instance_id: &str) {
        self.lock().health.remove(instance_id);
    }

    pub fn schedule_change(&self, instance_ids: &[String], start: Timestamp) {
        let now = self.clock.now();
        let live: Vec<String> = {
            let mut s = self.lock();
            instance_ids
                .iter()
                .filter(|id| {
                    s.instances
                        .get_mut(*id)
                        .filter(|i| !i.instance.state.is_gone_or_going())
                        .map(|i| i.reclaim_at = Some(start))
                        .is_some()
                })
                .cloned()
                .collect()
        };
        if live.is_empty() {
            return;
        }
        let entities: Vec<serde_json::Value> = live
            .iter()
            .map(|id| serde_json::json!({"entityValue": id}))
            .collect();
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

    fn publish(
        &self,
        detail_type: &str,
        source: &str,
        instance_id: &str,
        detail: serde_json::Value,
        at: Timestamp,
    ) {
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
        self.lock()
            .queue
            .extend(messages.into_iter().map(|(id, body)| (at, id, body)));
    }

    /// EC2's EventBridge event for a state change.
    pub fn state_change_event(
        &self,
        instance_id: &str,
        state: InstanceState,
        at: Timestamp,
    ) -> serde_json::Value {
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

impl State {
    /// Live instances in each reservation, by id.
    fn reservation_use(&self) -> BTreeMap<String, u32> {
        let mut used = BTreeMap::new();
        for i in self.instances.values() {
            if let Some(id) = &i.instance.capacity_reservation_id
                && !i.instance.state.is_gone_or_going()
            {
                *used.entry(id.clone()).or_insert(0) += 1;
            }
        }
        used
    }

    /// The reservations as EC2 lists them, `available` derived; one whose
    /// capacity block has ended is gone.
    fn list_reservations(&self, now: Timestamp) -> Vec<CapacityReservation> {
        let used = self.reservation_use();
        self.reservations
            .values()
            .filter(|r| r.end_time.is_none_or(|end| end > now))
            .map(|r| {
                let mut r = r.clone();
                r.available = r
                    .total
                    .saturating_sub(used.get(&r.id).copied().unwrap_or(0));
                r
            })
            .collect()
    }

    /// A reserved option's launch: the first option (cheapest first) with a
    /// reservation the request may target that has room now. Every reserved
    /// option tried without room is reported (`ReservationCapacityExceeded`).
    fn choose_reserved<'r>(
        &self,
        request: &'r LaunchRequest,
        now: Timestamp,
    ) -> (
        Option<(&'r PricedOffering, CapacityReservation)>,
        Vec<OfferingKey>,
    ) {
        let listed = self.list_reservations(now);
        let mut options: Vec<&PricedOffering> = request
            .options
            .iter()
            .filter(|o| o.capacity_type == CAPACITY_TYPE_RESERVED)
            .collect();
        options.sort_by(|a, b| a.price.total_cmp(&b.price));
        let mut unavailable = Vec::new();
        for o in options {
            // In the request's order (the launcher's preference).
            let target = request
                .reservations
                .iter()
                .filter_map(|t| listed.iter().find(|r| r.id == t.id))
                .find(|r| {
                    crate::provisioning::reservations::may_target(o, r)
                        && r.available > 0
                        && !r.is_expiring(now)
                });
            match target {
                Some(r) => return (Some((o, r.clone())), unavailable),
                None => unavailable.push(offering_key(o)),
            }
        }
        (None, unavailable)
    }

    /// The instance an earlier launch with this client token made:
    /// CreateFleet's idempotency (a retry takes no capacity twice).
    fn launched_for(&self, client_token: &str) -> Option<Instance> {
        let id = self.tokens.get(client_token)?;
        self.instances.get(id).map(|i| i.instance.clone())
    }

    /// The options EC2 buys from: the spot ones when any is spot (as
    /// Karpenter asks CreateFleet), else the on-demand ones, cheapest first.
    /// An option the region does not sell fails the whole request.
    fn purchase_options<'r>(
        &self,
        request: &'r LaunchRequest,
    ) -> Result<Vec<&'r PricedOffering>, CloudError> {
        if request.options.is_empty() {
            return Err(CloudError::invalid(
                format!("nodeclaim {}", request.claim_id),
                "no launch options",
            ));
        }
        let spot = request
            .options
            .iter()
            .any(|o| o.capacity_type == CAPACITY_TYPE_SPOT);
        let mut options: Vec<&PricedOffering> = request
            .options
            .iter()
            .filter(|o| o.capacity_type != CAPACITY_TYPE_RESERVED)
            .filter(|o| (o.capacity_type == CAPACITY_TYPE_SPOT) == spot)
            .collect();
        options.sort_by(|a, b| a.price.total_cmp(&b.price));
        if let Some(o) = options
            .iter()
            .find(|o| !self.sold.contains(&offering_key(o)))
        {
            return Err(CloudError::invalid(
                format!("nodeclaim {}", request.claim_id),
                format!(
                    "InvalidParameterValue: {} is not offered as {} in {}",
                    o.instance_type, o.capacity_type, o.zone
                ),
            ));
        }
        Ok(options)
    }

    /// lowest-price: the cheapest option with capacity; the cheaper ones
    /// found without capacity on the way are reported.
    fn choose_on_demand<'r>(
        &self,
        options: &[&'r PricedOffering],
    ) -> (Option<&'r PricedOffering>, Vec<OfferingKey>) {
        let mut unavailable = Vec::new();
        for o in options {
            let key = offering_key(o);
            if !self.no_capacity.contains(&key) {
                return (Some(o), unavailable);
            }
            unavailable.push(key);
        }
        (None, unavailable)
    }

    /// price-capacity-optimized over the spot pools
    /// ([`pools::price_capacity_optimized`]). EC2 weighs every pool, so
    /// every option without capacity (removed, or its pool exhausted) is
    /// reported.
    fn choose_spot<'r>(
        &self,
        options: &[&'r PricedOffering],
    ) -> (Option<&'r PricedOffering>, Vec<OfferingKey>) {
        let mut unavailable = Vec::new();
        let mut candidates = Vec::new();
        for o in options {
            let key = offering_key(o);
            let left = if self.no_capacity.contains(&key) {
                0
            } else {
                self.spot_pools.remaining(&key)
            };
            if left == 0 {
                unavailable.push(key);
            } else {
                candidates.push((*o, left));
            }
        }
        (pools::price_capacity_optimized(&candidates), unavailable)
    }

    fn add_template(
        &mut self,
        name: &str,
        tags: BTreeMap<String, String>,
        now: Timestamp,
    ) -> LaunchTemplate {
        if let Some(t) = self.templates.get(name) {
            return t.template.clone();
        }
        let n = self.next_template;
        self.next_template += 1;
        let template = LaunchTemplate {
            id: format!("lt-{:017x}", n),
            name: name.to_owned(),
            created_at: now,
            node_class: tags.get(ownership::NODECLASS).cloned(),
            pool: tags.get(ownership::NODEPOOL).cloned(),
            image_id: tags.get(ownership::IMAGE).cloned(),
        };
        self.templates.insert(
            name.to_owned(),
            SimTemplate {
                template: template.clone(),
                tags,
            },
        );
        template
    }

    /// The template a launch of `request` uses now, made when missing.
    fn ensure_template(&mut self, request: &LaunchRequest, now: Timestamp) {
        let class = request.node_class.as_deref().unwrap_or("default");
        let image = image_for(&self.kubernetes_version);
        let mut tags = request_tags(request, None);
        tags.insert(ownership::IMAGE.to_owned(), image.clone());
        let name = format!("nodewright/{class}/{}/{image}", request.pool);
        self.add_template(&name, tags, now);
    }

    /// A new pending instance of `o` for the request (a spot one takes a
    /// unit of its pool), remembered under the request's client token.
    fn start(
        &mut self,
        request: &LaunchRequest,
        o: &PricedOffering,
        reservation: Option<&CapacityReservation>,
        now: Timestamp,
    ) -> Instance {
        let n = self.next_id;
        self.next_id += 1;
        self.launches += 1;
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
            node_class: request.node_class.clone(),
            provider_id: format!("aws:///{}/{}", o.zone, id),
            price: o.price,
            image_id: Some(image_for(&self.kubernetes_version)),
            subnet_id: None,
            security_group_ids: Vec::new(),
            capacity_reservation_id: reservation.map(|r| r.id.clone()),
            capacity_reservation_type: reservation.map(|r| r.reservation_type),
            capacity_reservation_interruptible: reservation.is_some_and(|r| r.interruptible),
        };
        if let Some(pool) = spot_pool(&instance) {
            self.spot_pools.take(&pool);
        }
        let start = self.delays.start;
        self.instances.insert(
            id.clone(),
            SimInstance {
                instance: instance.clone(),
                request: request.clone(),
                tags: request_tags(request, Some(&request.claim_id)),
                next_transition: Some(now + start),
                reclaim_at: None,
            },
        );
        self.tokens.insert(request.client_token.clone(), id);
        self.notifications
            .push((now, instance.id.clone(), InstanceState::Pending));
        instance
    }

    /// A spot instance's unit goes back to its pool when it stops being
    /// live (shutting down, terminated, stopped), and is taken again should
    /// it come back.
    fn account_for_change(&mut self, pool: &OfferingKey, was_live: bool, is_live: bool) {
        match (was_live, is_live) {
            (true, false) => self.spot_pools.give_back(pool),
            (false, true) => self.spot_pools.take(pool),
            _ => {}
        }
    }
}

/// The capacity pool of a spot instance (`None` for on-demand).
fn spot_pool(i: &Instance) -> Option<OfferingKey> {
    (i.capacity_type == CAPACITY_TYPE_SPOT).then(|| OfferingKey {
        capacity_type: i.capacity_type.clone(),
        instance_type: i.instance_type.clone(),
        zone: i.zone.clone(),
    })
}

fn offering_key(o: &PricedOffering) -> OfferingKey {
    OfferingKey {
        capacity_type: o.capacity_type.clone(),
        instance_type: o.instance_type.clone(),
        zone: o.zone.clone(),
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
        if let Some(instance) = s.launched_for(&request.client_token) {
            return Ok(Launched {
                instance,
                unavailable: vec![],
            });
        }
        // A reserved option first, targeted at a reservation with room;
        // when none has room, the other options as usual.
        let (reserved, mut full) = s.choose_reserved(request, now);
        if let Some((o, r)) = reserved {
            s.ensure_template(request, now);
            let instance = s.start(request, o, Some(&r), now);
            return Ok(Launched {
                instance,
                unavailable: full,
            });
        }
        if request
            .options
            .iter()
            .all(|o| o.capacity_type == CAPACITY_TYPE_RESERVED)
        {
            return Err(CloudError::InsufficientCapacity {
                offerings: full,
                message: "ReservationCapacityExceeded: the capacity reservations are full"
                    .to_owned(),
            });
        }
        let options = s.purchase_options(request)?;
        s.ensure_template(request, now);
        let spot = options
            .iter()
            .any(|o| o.capacity_type == CAPACITY_TYPE_SPOT);
        let (chosen, unavailable) = if spot {
            s.choose_spot(&options)
        } else {
            s.choose_on_demand(&options)
        };
        full.extend(unavailable);
        let unavailable = full;
        let Some(o) = chosen else {
            return Err(CloudError::InsufficientCapacity {
                offerings: unavailable,
                message:
                    "InsufficientInstanceCapacity: we currently do not have sufficient capacity"
                        .to_owned(),
            });
        };
        let instance = s.start(request, o, None, now);
        Ok(Launched {
            instance,
            unavailable,
        })
    }

    async fn terminate(&self, instance_ids: &[String]) -> Result<(), CloudError> {
        for id in instance_ids {
            let state = {
                let mut s = self.lock();
                let found = s
                    .instances
                    .get(id)
                    .filter(|i| ownership::is_ours(&i.tags, SIM_CLUSTER))
                    .map(|i| i.instance.state);
                if found.is_none() {
                    s.foreign_terminations.push(id.clone());
                }
                found
            };
            if state.is_some_and(|s| !s.is_gone_or_going()) {
                self.external_state_change(id, InstanceState::ShuttingDown);
            }
        }
        Ok(())
    }

    async fn resolved_class(
        &self,
        _class: &crate::config::NodeClass,
    ) -> Result<crate::model::ResolvedClass, CloudError> {
        Ok(crate::model::ResolvedClass {
            image_ids: vec![self.image_id()],
            ..Default::default()
        })
    }

    async fn launch_templates(&self) -> Result<Vec<LaunchTemplate>, CloudError> {
        Ok(self
            .lock()
            .templates
            .values()
            .filter(|t| ownership::is_ours(&t.tags, SIM_CLUSTER))
            .map(|t| t.template.clone())
            .collect())
    }

    async fn delete_launch_template(&self, template: &LaunchTemplate) -> Result<bool, CloudError> {
        let mut s = self.lock();
        let ours = s.templates.get(&template.name).is_some_and(|t| {
            t.template.id == template.id && ownership::is_ours(&t.tags, SIM_CLUSTER)
        });
        if !ours {
            if s.templates.contains_key(&template.name) {
                s.foreign_template_deletes.push(template.name.clone());
            }
            return Ok(false);
        }
        s.templates.remove(&template.name);
        Ok(true)
    }

    async fn capacity_reservations(&self) -> Result<Vec<CapacityReservation>, CloudError> {
        let now = self.clock.now();
        Ok(self.lock().list_reservations(now))
    }

    /// As DescribeInstanceStatus: every running instance of the account
    /// (ours and the neighbours') with a failed check or an event.
    async fn instance_health(&self) -> Result<Vec<InstanceHealth>, CloudError> {
        let s = self.lock();
        Ok(s.health
            .iter()
            .filter(|(id, checks)| {
                !checks.is_empty()
                    && s.instances
                        .get(*id)
                        .is_some_and(|i| i.instance.state == InstanceState::Running)
            })
            .map(|(id, checks)| InstanceHealth {
                instance_id: id.clone(),
                checks: checks.clone(),
            })
            .collect())
    }

    /// An instance whose reservation has ended runs on outside it, as EC2
    /// describes it: on-demand, naming no reservation.
    async fn instances(&self) -> Result<Vec<Instance>, CloudError> {
        let now = self.clock.now();
        let s = self.lock();
        let ended = |id: &str| {
            s.reservations
                .get(id)
                .is_none_or(|r| r.end_time.is_some_and(|end| end <= now))
        };
        Ok(s.instances
            .values()
            .filter(|i| {
                i.instance.state != InstanceState::Terminated
                    && ownership::is_ours(&i.tags, SIM_CLUSTER)
            })
            .map(|i| {
                let mut out = i.instance.clone();
                if out.capacity_reservation_id.as_deref().is_some_and(ended) {
                    out.capacity_type = crate::scheduling::labels::CAPACITY_TYPE_ON_DEMAND.into();
                    out.capacity_reservation_id = None;
                    out.capacity_reservation_type = None;
                    out.capacity_reservation_interruptible = false;
                }
                out
            })
            .collect())
    }
}

/// The tags a launch of `request` puts on what it creates (a template
/// without the claim, an instance with it), as the EC2 adapter tags them.
fn request_tags(request: &LaunchRequest, claim: Option<&str>) -> BTreeMap<String, String> {
    ownership::resource_tags(
        SIM_CLUSTER,
        &request
            .node_class_spec
            .as_ref()
            .map(|c| c.tags.clone())
            .unwrap_or_default(),
        &request.pool,
        request.node_class.as_deref().unwrap_or("default"),
        claim,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::scheduling::labels::CAPACITY_TYPE_ON_DEMAND;
    use crate::sim::catalog;

    fn cloud() -> SimCloud {
        SimCloud::new(
            catalog::catalog("us-east-1").expect("region"),
            SimClock::default(),
        )
    }

    fn request(token: &str, options: &[PricedOffering]) -> LaunchRequest {
        LaunchRequest {
            claim_id: format!("claim-{token}"),
            client_token: token.to_owned(),
            pool: "default".into(),
            node_class: None,
            node_class_spec: None,
            options: options.to_vec(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            kubelet: Default::default(),
            reservations: Vec::new(),
        }
    }

    /// The catalog's offerings of `instance_type` as `capacity_type`, at their catalog prices.
    fn offerings(c: &SimCloud, instance_type: &str, capacity_type: &str) -> Vec<PricedOffering> {
        let catalog = c.lock().catalog.clone();
        catalog
            .offerings
            .iter()
            .filter(|o| o.instance_type == instance_type && o.capacity_type == capacity_type)
            .cloned()
            .collect()
    }

    fn with_price(o: &PricedOffering, price: f64) -> PricedOffering {
        PricedOffering { price, ..o.clone() }
    }

    /// How many live instances each (type, zone) has.
    fn per_pool(c: &SimCloud) -> BTreeMap<(String, String), usize> {
        let mut out = BTreeMap::new();
        for i in c
            .all_instances()
            .iter()
            .filter(|i| !i.instance.state.is_gone_or_going())
        {
            *out.entry((i.instance.instance_type.clone(), i.instance.zone.clone()))
                .or_insert(0) += 1;
        }
        out
    }

    /// Three near-equal m5.large pools and a dearer c5.large one: shallow
    /// pools are spread over, each gives exactly its depth, then answers
    /// insufficient capacity naming it; a terminated instance gives back.
    #[tokio::test]
    async fn shallow_spot_pools_spread_and_run_out_at_their_depth() {
        let c = cloud();
        let m5 = offerings(&c, "m5.large", CAPACITY_TYPE_SPOT);
        let c5 = offerings(&c, "c5.large", CAPACITY_TYPE_SPOT);
        assert!(m5.len() >= 3 && !c5.is_empty(), "catalog: {m5:?} {c5:?}");
        let options = vec![
            with_price(&m5[0], 0.030),
            with_price(&m5[1], 0.031),
            with_price(&m5[2], 0.032),
            with_price(&c5[0], 0.050),
        ];
        let depth = 3;
        c.set_spot_pools(PoolDepths {
            all: Some(depth),
            ..PoolDepths::default()
        });
        let mut order = Vec::new();
        let mut n = 0;
        let error = loop {
            n += 1;
            match c.launch(&request(&format!("t{n}"), &options)).await {
                Ok(l) => order.push((l.instance.instance_type, l.instance.zone)),
                Err(e) => break e,
            }
            assert!(n < 100, "never ran out");
        };
        // The first three launches: one per near-cheapest pool, not all on the cheapest.
        let first: BTreeSet<_> = order[..3].iter().cloned().collect();
        assert_eq!(first.len(), 3, "{order:?}");
        assert!(
            !first.contains(&(c5[0].instance_type.clone(), c5[0].zone.clone())),
            "{order:?}"
        );
        // The dear pool only once the near-cheapest ones are gone.
        assert!(order[..9].iter().all(|(t, _)| t == "m5.large"), "{order:?}");
        assert_eq!(order.len(), options.len() * depth as usize);
        let pools = per_pool(&c);
        assert_eq!(pools.len(), options.len());
        assert!(pools.values().all(|n| *n == depth as usize), "{pools:?}");
        let CloudError::InsufficientCapacity { offerings: out, .. } = error else {
            panic!("{error:?}")
        };
        let want: BTreeSet<OfferingKey> = options.iter().map(offering_key).collect();
        assert_eq!(out.iter().cloned().collect::<BTreeSet<_>>(), want);
        // Terminating one instance frees its unit: the next launch takes it.
        let victim = c
            .all_instances()
            .into_iter()
            .find(|i| i.instance.zone == m5[1].zone)
            .expect("an instance there");
        c.terminate(std::slice::from_ref(&victim.instance.id))
            .await
            .expect("terminates");
        let again = c
            .launch(&request("after", &options))
            .await
            .expect("capacity again");
        assert_eq!(
            (
                again.instance.instance_type.as_str(),
                again.instance.zone.as_str()
            ),
            ("m5.large", m5[1].zone.as_str())
        );
        assert_eq!(again.unavailable.len(), options.len() - 1);
    }

    /// A per-offering depth overrides the one for all pools, and a pool
    /// reclaimed by EC2 gets its unit back when the instance shuts down.
    #[tokio::test]
    async fn an_override_and_a_reclaim() {
        let c = cloud();
        let m5 = offerings(&c, "m5.large", CAPACITY_TYPE_SPOT);
        let options = vec![with_price(&m5[0], 0.030), with_price(&m5[1], 0.040)];
        let cheap = offering_key(&options[0]);
        c.set_spot_pools(PoolDepths {
            all: Some(50),
            offerings: [(cheap.clone(), 1)].into(),
            ..PoolDepths::default()
        });
        let first = c.launch(&request("a", &options)).await.expect("launches");
        assert_eq!(first.instance.zone, m5[0].zone);
        let second = c.launch(&request("b", &options)).await.expect("launches");
        assert_eq!(second.instance.zone, m5[1].zone);
        assert_eq!(second.unavailable, vec![cheap.clone()]);
        assert_eq!(c.spot_remaining(&cheap), 0);
        assert!(c.interrupt_spot(&first.instance.id));
        c.clock.advance(SignedDuration::from_mins(3));
        c.advance(c.clock.now());
        assert_eq!(c.spot_remaining(&cheap), 1);
    }

    /// The default depths are deep: a fleet of a few hundred spot nodes
    /// lands on the cheapest offering, as under lowest-price.
    #[tokio::test]
    async fn with_default_depths_a_modest_fleet_lands_on_the_cheapest() {
        let c = cloud();
        let mut options = offerings(&c, "m5.large", CAPACITY_TYPE_SPOT);
        options.extend(offerings(&c, "m5a.large", CAPACITY_TYPE_SPOT));
        options.extend(offerings(&c, "m6i.large", CAPACITY_TYPE_SPOT));
        let cheapest = options
            .iter()
            .min_by(|a, b| a.price.total_cmp(&b.price))
            .cloned()
            .expect("options");
        let fleet = 300;
        for n in 0..fleet {
            let l = c
                .launch(&request(&format!("t{n}"), &options))
                .await
                .expect("launches");
            assert_eq!(
                (&l.instance.instance_type, &l.instance.zone),
                (&cheapest.instance_type, &cheapest.zone),
                "launch {n}"
            );
        }
        let key = offering_key(&cheapest);
        assert_eq!(
            c.spot_remaining(&key),
            pools::seeded_depth(pools::DEFAULT_SEED, &key) - fleet
        );
    }

    /// On-demand is lowest-price: spot pools do not touch it, removed capacity does.
    #[tokio::test]
    async fn on_demand_stays_lowest_price() {
        let c = cloud();
        c.set_spot_pools(PoolDepths {
            all: Some(1),
            ..PoolDepths::default()
        });
        let m5 = offerings(&c, "m5.large", CAPACITY_TYPE_ON_DEMAND);
        let options = vec![
            with_price(&m5[0], 0.096),
            with_price(&m5[1], 0.097),
            with_price(&m5[2], 0.098),
        ];
        for n in 0..5 {
            let l = c
                .launch(&request(&format!("t{n}"), &options))
                .await
                .expect("launches");
            assert_eq!(l.instance.zone, m5[0].zone);
            assert!(l.unavailable.is_empty());
        }
        let gone = offering_key(&options[0]);
        c.remove_capacity(gone.clone());
        let l = c
            .launch(&request("after", &options))
            .await
            .expect("launches");
        assert_eq!(
            (l.instance.zone, l.unavailable),
            (m5[1].zone.clone(), vec![gone])
        );
    }

    /// A repeated client token returns the first instance and takes no
    /// second unit of its pool.
    #[tokio::test]
    async fn a_repeated_client_token_takes_depth_once() {
        let c = cloud();
        let options = offerings(&c, "m5.large", CAPACITY_TYPE_SPOT)[..1].to_vec();
        let pool = offering_key(&options[0]);
        c.set_spot_pools(PoolDepths {
            all: Some(2),
            ..PoolDepths::default()
        });
        let a = c
            .launch(&request("same", &options))
            .await
            .expect("launches");
        let b = c
            .launch(&request("same", &options))
            .await
            .expect("the same instance");
        assert_eq!(a.instance.id, b.instance.id);
        assert_eq!((c.launches(), c.spot_remaining(&pool)), (1, 1));
        c.launch(&request("other", &options))
            .await
            .expect("the second unit");
        assert_eq!(c.spot_remaining(&pool), 0);
        let e = c
            .launch(&request("third", &options))
            .await
            .expect_err("the pool is empty");
        let CloudError::InsufficientCapacity { offerings: out, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(out, vec![pool]);
    }
}
