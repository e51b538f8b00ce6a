//! The disruption scenarios (`tests/scenarios/`, one test each) on the
//! in-memory adapters: each file states its own expectations — nodes
//! removed for a reason and not before, replacements, rollbacks, budgets
//! held, PDBs never broken — and fails on any that is unmet.

use nodewright::sim::SimSettings;
use nodewright_tests::sim::{run, scenario_file};

macro_rules! scenarios {
    ($($test:ident => $file:literal),* $(,)?) => {$(
        #[tokio::test]
        async fn $test() {
            let s = scenario_file($file);
            let (_, failures) = run(&s, SimSettings::default()).await;
            assert!(failures.is_empty(), "{}: {failures:#?}", $file);
        }
    )*};
}

scenarios! {
    upgrade_walkthrough => "upgrade-walkthrough.yaml",
    consolidation_example => "consolidation-example.yaml",
    consolidation_under_the_threshold_moves_nothing => "consolidation-threshold.yaml",
    emptiness_after_30s_and_not_before => "emptiness-30s.yaml",
    expiration_at_720h_and_not_before => "expiration-720h.yaml",
    drift_after_a_nodeclass_change => "drift-nodeclass.yaml",
    drift_after_a_nodepool_label_change => "drift-nodepool-labels.yaml",
    budgets_of_0_1_and_10_percent_and_a_schedule => "budgets.yaml",
    do_not_disrupt_true_and_a_duration => "do-not-disrupt.yaml",
    a_failed_replacement_is_rolled_back => "replacement-rollback.yaml",
    node_repair => "node-repair.yaml",
    a_static_pool_keeps_its_replicas => "static-capacity.yaml",
    a_node_that_lost_readiness_is_no_room_for_new_pods => "not-ready-node.yaml",
    a_replace_rebalance_never_evicts_a_do_not_disrupt_pod => "rebalance-replace-do-not-disrupt.yaml",
    an_expiring_node_keeps_its_do_not_disrupt_pod_until_the_deadline => "expiration-do-not-disrupt.yaml",
    simultaneous_interruptions_get_a_replacement_each => "simultaneous-interruptions.yaml",
    a_cordon_rebalance_is_no_removal => "rebalance-cordon.yaml",
    nodepool_template_annotations_reach_the_nodes => "nodepool-template-annotations.yaml",
    terminating_pods_do_not_outlive_the_deadline => "terminating-at-deadline.yaml",
    a_balanced_pool_keeps_a_node_whose_saving_does_not_justify_its_disruption => "balanced.yaml",
    a_node_overlay_price_steers_the_launch => "node-overlay.yaml",
    a_pod_that_selects_dedicated_tenancy_gets_a_dedicated_node => "dedicated-tenancy.yaml",
    capacity_reservations_are_used_first_and_fallen_back_from_when_full => "capacity-reservations.yaml",
    a_capacity_block_is_drained_before_it_ends => "capacity-block-expiry.yaml",
    a_node_whose_reservation_ended_becomes_on_demand => "capacity-reservation-ends.yaml",
    a_capacity_buffer_is_launched_for_kept_and_refilled => "capacity-buffer.yaml",
    a_capacity_buffer_never_passes_the_pool_limits_nor_shows_as_pending => "capacity-buffer-limits.yaml",
    consolidation_keeps_the_room_of_a_capacity_buffer => "capacity-buffer-consolidation.yaml",
    a_capacity_buffer_follows_the_replicas_of_its_workload => "capacity-buffer-scalable-ref.yaml",
    consolidation_moves_a_node_into_a_capacity_reservation => "consolidation-into-reservation.yaml",
}

/// `capacity-buffer-scalable-ref.yaml`'s plan at 3m: buffer `spare` (50 %
/// of 4 replicas) wants 2 chunks, both on the room launched for it; buffer
/// `ghost` names a Deployment that does not exist: no chunk, and it says
/// why with Karpenter's reason (suite_test.go It("should set
/// ReadyForProvisioning=False when scalable ref is not found")).
#[tokio::test]
async fn a_capacity_buffer_whose_workload_is_missing_says_why_in_the_plan() {
    let s = scenario_file("capacity-buffer-scalable-ref.yaml");
    let (sim, _) = run(&s, SimSettings::default()).await;
    let plan = sim.dry_runs.first().expect("the plan at 3m");
    let by = |name: &str| {
        plan.buffers
            .iter()
            .find(|b| b.buffer == name)
            .unwrap_or_else(|| panic!("{name} in {:#?}", plan.buffers))
            .clone()
    };
    let spare = by("default/spare");
    assert_eq!((spare.wanted, spare.placed), (2, 2), "{spare:?}");
    assert_eq!(spare.condition().0, "FitsExistingCapacity");
    let ghost = by("default/ghost");
    assert_eq!(ghost.wanted, 0, "{ghost:?}");
    let (condition, message) = ghost.condition();
    assert_eq!(condition, "NotReadyForProvisioning");
    assert_eq!(
        message,
        "ScalableRefNotFound: deployments.apps \"nothing\" not found"
    );
    assert!(
        plan.render()
            .contains("NotReadyForProvisioning: ScalableRefNotFound"),
        "{}",
        plan.render()
    );
}
