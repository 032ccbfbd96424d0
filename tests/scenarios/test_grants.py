"""Who may call what: every routine's grantees, listed.

The folder of a routine's file (sql/functions/runner/, operator/, admin/,
inline/, internal/, common/) is the one source of truth for who may call it; the installer turns
it into SECURITY DEFINER, the 'access: ...' comment and the EXECUTE grant.
This test lists the whole surface by hand, so a routine that changes hands,
appears or disappears shows in the diff of a test, not only in a folder.
"""

from __future__ import annotations

import pytest
from conftest import TestDatabase

from qtg_runner.db.migrate import sql_dir

QTG_ADMIN = {"grant_network_privileges"}
"""sql/functions/qtg_admin/: the installer's own routines, re-created by every migrate."""

RUNNER = {
    "ccip_send_route",
    "ccip_stranded_sends",
    "claim_callbacks",
    "cctp_burn_route",
    "cctp_mint_route",
    "claim_observe",
    "claim_observe_batch",
    "check_claims",
    "claim_ready_nodes",
    "claim_recovery_nodes",
    "complete_callback",
    "complete_observe",
    "complete_observe_batch",
    "complete_recovery",
    "complete_submit",
    "complete_submit_batch",
    "evm_chains",
    "evm_next_nonce",
    "evm_nonce_gaps",
    "settle_evm_nonces",
    "evm_stale_transactions",
    "evm_transfer_route",
    "end_stalled_sessions",
    "bybit_withdraw_route",
    "bybit_deposit_route",
    "paid_in_deposits",
    "exchange_venue_list",
    "claim_capital_transfers",
    "record_capital_transfer_check",
    "expire_movements",
    "expire_proposals",
    "promote_audit",
    "fail_submit",
    "heartbeat",
    "observe_candidates",
    "quarantine_nodes",
    "record_ccip_manual_execution",
    "record_intent_prepared",
    "record_intent_prepared_batch",
    "record_evm_replacement",
    "record_nonce_closed",
    "record_nonce_fill",
    "refresh_lane_pacing",
    "roll_up_pipeline_counts",
    "registered_executors",
    "release_nodes",
    "lease_endpoints",
    "report_executor_health",
    "start_approved_movements",
    "stargate_send_route",
    "worker_stopped",
    "begin_balance_read",
    "abandoned_transactions",
    "record_balance_snapshots",
    "verify_drift",
    "prune_balance_snapshots",
    "prune_callbacks",
}
OPERATOR = {
    "requeue_node",
    "approve_movement",
    "approve_movements",
    "audit_export",
    "limit_held_nodes",
    "reset_breaker",
    "trip_breaker",
    "verify_audit_chain",
    "approve_proposal",
    "cancel_movement",
    "create_movement",
    "create_movements",
    "propose_callback_target",
    "propose_executor_config",
    "propose_lane_baseline",
    "propose_template",
    "reject_proposal",
    "release_quarantine",
    "replay_callback",
    "set_priority",
    "acknowledge_drift_alert",
    "confirm_balance_baseline",
    "rehearsal_input",
    "record_rehearsal",
    "request_rehearsal",
    "claim_rehearsal_request",
    "finish_rehearsal_request",
}
OPERATOR_PROCEDURES = {
    "movement_create",
    "movement_approve",
    "movement_cancel",
    "movement_priority",
    "node_requeue",
    "proposal_approve",
    "proposal_reject",
    "quarantine_release",
    "drift_acknowledge",
    "breaker_trip",
    "breaker_reset",
}
"""The operator's actions as procedures (CALL in psql), granted as the operator's
functions are; every other routine is a function."""
ADMIN = {
    "propose_registry_change",
    "allow_destination",
    "disallow_destination",
    "register_executor",
    "upsert_callback_target",
    "upsert_chain",
    "set_value_limit",
    "upsert_chain_protocol",
    "upsert_ccip_lane",
    "upsert_exchange_venue",
    "upsert_venue_chain",
    "upsert_venue_deposit_address",
    "upsert_chain_token",
    "upsert_treasury_account",
    "set_balance_settings",
    "set_callback_settings",
    "load_rehearsal_registry",
}
"""Deploy steps: run as their caller, granted to nobody (the admin calls them)."""
INLINE = {
    "skip_count",
    "skip_day_runs",
    "signs_evm",
    "audit_canonical",
    "audit_row_hash",
    "balance_state",
    "balance_change",
    "balance_decided",
    "apply_mask",
    "apply_rounds",
    "unprintable",
}
"""Internal helpers PostgreSQL inlines (no search_path of their own): granted to nobody."""
INTERNAL = {
    "evm_nonce_open",
    "check_read_committed",
    "ccip_own_evidence",
    "keccak256",
    "abi_uint",
    "approve_movement_rows",
    "bridge_call_problem",
    "cctp_burn_message",
    "settle_mint_messages",
    "settle_withdrawal_transfers",
    "cctp_mint_expiry_problem",
    "cctp_received_message",
    "intent_payload_problem",
    "intent_route",
    "json_same",
    "jsonb_pick",
    "recovery_evidence_problem",
    "stargate_send_calldata",
    "ccip_lane",
    "ccip_send_tx_problem",
    "ccip_word",
    "treasury_signer",
    "check_args",
    "check_callback_target",
    "check_claim_args",
    "check_worker",
    "check_executor_schema",
    "check_fee_caps",
    "check_lane_settings",
    "check_limits",
    "check_number",
    "check_plan",
    "check_proposal",
    "check_template",
    "chain_protocol",
    "claim_hash",
    "claim_held",
    "claim_refusals",
    "destination_kind",
    "token_units",
    "claim_secret",
    "config_value",
    "create_movement_rows",
    "enqueue_callbacks",
    "evm_address",
    "evm_decode_raw",
    "evm_nonce_closed",
    "finish_nodes",
    "give_back_value",
    "host_address_problem",
    "follow_capital_transfers",
    "advance_balance_anchors",
    "running_transactions",
    "balance_candidates",
    "intent_document",
    "intent_tx_problem",
    "lane_of",
    "limit_holds",
    "limit_problem",
    "limit_refusals",
    "lock_claimed_node",
    "lock_claimed_nodes",
    "lock_rehearsable",
    "notify_work",
    "number_problem",
    "observe_claim_secret",
    "observe_pacing",
    "open_proposal",
    "raise_node_error",
    "registered_chain",
    "registered_venue",
    "recheck_expiry",
    "reopen_after_retry",
    "register_template",
    "set_executor_config",
    "set_movement_states",
    "set_proposal_states",
    "set_quarantine",
    "set_breaker",
    "trip_breakers",
    "settle_movements",
    "start_movement_rows",
    "stop_movement",
    "transient_error",
    "upsert_lane_baseline",
    "write_audit",
    "node_balance_effects",
    "balance_expectations",
    "apply_refusal",
    "apply_answers",
    "apply_registry_entry",
    "registry_entry_value",
    "check_reason",
    "route_node",
    "route_chain",
    "route_token",
    "route_venue",
    "route_venue_chain",
    "registry_row",
    "check_arrays",
    "refuse_four_eyes",
    "engine_next_nonce",
    "check_registry_name",
    "audit_registry",
    "registry_address",
    "cctp_fee_bps",
    "rehearsal_registry_tables",
}
COMMON = {
    "clock": "runner operator reader",
    "decision_clock": "",
    "substitute_params": "",
    "validate_node_config": "",
}

# a routine never granted or revoked has no proacl: its default, EXECUTE for PUBLIC
GRANTS = """
    SELECT p.proname, p.prosecdef, coalesce(obj_description(p.oid, 'pg_proc'), ''),
           coalesce((SELECT string_agg(g.name, ' ' ORDER BY g.name)
                       FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                      CROSS JOIN LATERAL (SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                                      ELSE pg_get_userbyid(a.grantee) END AS name) g
                      WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '')
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = %s
     ORDER BY 1"""


def test_the_folders_are_the_surface_listed_here() -> None:
    folders = {
        folder: {p.stem for p in (sql_dir() / "functions" / folder).glob("*.sql")}
        for folder in ("runner", "operator", "admin", "inline", "internal", "common", "qtg_admin")
    }
    assert folders == {
        "runner": RUNNER,
        "operator": OPERATOR | OPERATOR_PROCEDURES,
        "admin": ADMIN,
        "inline": INLINE,
        "internal": INTERNAL,
        "common": set(COMMON),
        "qtg_admin": QTG_ADMIN,
    }


def test_the_installers_routines_are_granted_to_nobody(db: TestDatabase) -> None:
    """qtg_admin's routines, the installer's own and the migrations' (a CHECK's
    function, a trigger's), are the owner's alone: a new routine's EXECUTE
    for PUBLIC is taken back, also from the ones every migrate re-creates."""
    rows = db.connect().execute(GRANTS, ("qtg_admin",)).fetchall()
    assert {row[0] for row in rows} >= QTG_ADMIN
    assert [row for row in rows if row[3] != ""] == []


@pytest.mark.parametrize("network", ["mainnet", "testnet"])
def test_every_routine_of_a_network_has_exactly_its_folders_grantees(
    db: TestDatabase, network: str
) -> None:
    rows = db.connect().execute(GRANTS, (network,)).fetchall()
    expected = sorted(
        [(name, True, "access: runner", f"qtg_{network}_runner") for name in RUNNER]
        + [
            (name, True, "access: operator", f"qtg_{network}_operator")
            for name in OPERATOR | OPERATOR_PROCEDURES
        ]
        + [(name, False, "access: admin", "") for name in ADMIN]
        + [(name, False, "", "") for name in INTERNAL | INLINE]
    )
    assert sorted(rows) == expected


def test_the_shared_routines_run_as_their_caller_and_only_the_clock_is_granted(
    db: TestDatabase,
) -> None:
    rows = db.connect().execute(GRANTS, ("qtg",)).fetchall()
    every_role = sorted(
        f"qtg_{net}_{kind}"
        for net in ("mainnet", "testnet")
        for kind in ("runner", "operator", "reader")
    )
    roles = {"runner operator reader": " ".join(every_role), "": ""}
    assert rows == [(name, False, "", roles[COMMON[name]]) for name in sorted(COMMON)]


def test_the_procedures_are_the_operators_call_forms_and_every_other_routine_a_function(
    db: TestDatabase,
) -> None:
    query = """SELECT n.nspname, p.proname
                 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname IN ('qtg', 'mainnet', 'testnet') AND p.prokind <> 'f'"""
    rows = db.connect().execute(query).fetchall()
    assert sorted(rows) == sorted(
        (network, name) for network in ("mainnet", "testnet") for name in OPERATOR_PROCEDURES
    )
