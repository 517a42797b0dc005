//! The contract of job runs, report routes, reclaims and agent commands (issue 24): every test
//! runs against SQLite and against PostgreSQL.

use fleetlens_core::jobcard::ReportRouteSpec;
use fleetlens_core::reclaim::{
    ReclaimAction, ReclaimCase, ReclaimLogLine, ReclaimLogStep, ReclaimPolicySpec, ReclaimStatus,
};
use fleetlens_core::{AgentCommandId, MessageKind, ProcessOwner, ReclaimId, WorkloadState};
use fleetlens_store::actions::{FinishedRun, JobRunFilter, JobSighting};
use fleetlens_store::alerts::NewNotification;
use fleetlens_store::reclaim::{AgentCommand, ReclaimRecord, ReclaimWrite};
use fleetlens_store::{DEFAULT_ORG, Store};
use fleetlens_tests::Backend;

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    job_runs_merge_sightings_and_end_once,
    reclaims_log_every_step_and_commands_are_taken_once,
);

const T0: i64 = 1_790_000_000_000;

fn sighting(key: &str, gpus: &[&str], first: i64, last: i64) -> JobSighting {
    JobSighting {
        run_key: key.into(),
        host: "node-1".into(),
        owner: ProcessOwner { user: Some("alice".into()), ..Default::default() },
        gpu_uuids: gpus.iter().map(|g| g.to_string()).collect(),
        first_ms: first,
        last_ms: last,
    }
}

async fn channel(store: &dyn Store) -> fleetlens_core::ChannelId {
    store
        .insert_notification_channel(
            DEFAULT_ORG,
            &fleetlens_store::alerts::NewChannel {
                name: "hook".into(),
                kind: fleetlens_core::ChannelKind::Webhook,
                url: "http://127.0.0.1:9/".into(),
                is_default: false,
                min_interval_ms: 0,
                group_by: vec![],
                group_wait_s: 0,
                group_interval_s: 0,
                digest: String::new(),
                digest_at_min: 0,
            },
            T0,
        )
        .await
        .expect("a new channel")
        .id
}

async fn job_runs_merge_sightings_and_end_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let other = store.create_org("other", T0).await.unwrap();
    // Sightings in any order merge: earliest first, latest last, GPUs united.
    let opened = store
        .record_job_sightings(DEFAULT_ORG, &[sighting("slurm:7", &["GPU-b"], T0 + 5_000, T0 + 9_000)], 60_000, T0)
        .await
        .unwrap();
    assert_eq!(opened, 1);
    let opened = store
        .record_job_sightings(
            DEFAULT_ORG,
            &[sighting("slurm:7", &["GPU-a"], T0, T0 + 6_000), sighting("pid:node-1/9", &["GPU-c"], T0, T0 + 1_000)],
            60_000,
            T0,
        )
        .await
        .unwrap();
    assert_eq!(opened, 1);
    let run = store.job_run_by_key(DEFAULT_ORG, "slurm:7").await.unwrap().expect("run");
    assert_eq!(run.gpu_uuids, ["GPU-a", "GPU-b"]);
    assert_eq!((run.first_ms, run.last_ms), (T0, T0 + 9_000));
    assert_eq!(run.owner.user.as_deref(), Some("alice"));
    assert_eq!(run.ended_ms, None);
    assert_eq!(store.open_job_runs().await.unwrap().len(), 2);
    // Organisations are apart.
    assert_eq!(store.job_run(other, run.id).await.unwrap(), None);
    assert_eq!(store.job_run_by_key(other, "slurm:7").await.unwrap(), None);

    // An end request, then the end with its card and message, once.
    assert!(store.request_job_end(DEFAULT_ORG, run.id, T0 + 8_000, T0 + 10_000).await.unwrap());
    let ch = channel(store.as_ref()).await;
    let note =
        NewNotification { channel_id: ch, kind: MessageKind::JobReport, seq: run.id.get(), payload: "{}".into() };
    let done = FinishedRun {
        ended_ms: T0 + 8_000,
        reason: "requested",
        team_id: None,
        card: "{\"gpu_hours\":1}",
        notify: Some(&note),
    };
    assert!(store.finish_job_run(DEFAULT_ORG, run.id, &done, T0 + 11_000).await.unwrap());
    assert!(!store.finish_job_run(DEFAULT_ORG, run.id, &done, T0 + 12_000).await.unwrap(), "a run ends once");
    assert!(!store.request_job_end(DEFAULT_ORG, run.id, T0, T0).await.unwrap());
    assert_eq!(store.outbox_backlog().await.unwrap(), 1, "one message, however often it is finished");
    let run = store.job_run(DEFAULT_ORG, run.id).await.unwrap().unwrap();
    assert_eq!(run.end_requested_ms, Some(T0 + 8_000));
    assert_eq!((run.ended_ms, run.end_reason.as_deref()), (Some(T0 + 8_000), Some("requested")));
    assert_eq!(run.card.as_deref(), Some("{\"gpu_hours\":1}"));
    assert_eq!(run.notified_channel_id, Some(ch));

    // Late data of the ended run is dropped; a sighting well after it opens a new run.
    let opened = store
        .record_job_sightings(DEFAULT_ORG, &[sighting("slurm:7", &["GPU-a"], T0 + 30_000, T0 + 31_000)], 60_000, T0)
        .await
        .unwrap();
    assert_eq!(opened, 0);
    let opened = store
        .record_job_sightings(DEFAULT_ORG, &[sighting("slurm:7", &["GPU-a"], T0 + 600_000, T0 + 601_000)], 60_000, T0)
        .await
        .unwrap();
    assert_eq!(opened, 1);
    let newest = store.job_run_by_key(DEFAULT_ORG, "slurm:7").await.unwrap().unwrap();
    assert_ne!(newest.id, run.id);
    assert_eq!(newest.first_ms, T0 + 600_000);

    // Listing: by status and time.
    let all = JobRunFilter { open: None, from_ms: 0, to_ms: i64::MAX, limit: 100 };
    assert_eq!(store.job_runs(DEFAULT_ORG, &all).await.unwrap().len(), 3);
    let ended = store.job_runs(DEFAULT_ORG, &JobRunFilter { open: Some(false), ..all.clone() }).await.unwrap();
    assert_eq!(ended.iter().map(|r| r.id).collect::<Vec<_>>(), [run.id]);
    let running = store.job_runs(DEFAULT_ORG, &JobRunFilter { open: Some(true), ..all.clone() }).await.unwrap();
    assert_eq!(running.len(), 2);
    let late = store.job_runs(DEFAULT_ORG, &JobRunFilter { from_ms: T0 + 100_000, ..all.clone() }).await.unwrap();
    assert_eq!(late.len(), 1);
    assert!(store.job_runs(other, &all).await.unwrap().is_empty());

    // Report routes.
    let route = ReportRouteSpec {
        team_id: None,
        owner: Some("alice".into()),
        channel_id: ch,
        min_gpu_hours: 0.5,
        min_waste_pct: 20.0,
    };
    let saved = store.insert_report_route(DEFAULT_ORG, &route, T0).await.unwrap();
    assert_eq!((saved.org_id, saved.created_ms, &saved.route), (DEFAULT_ORG, T0, &route));
    assert_eq!(store.report_routes(DEFAULT_ORG).await.unwrap(), vec![saved.clone()]);
    assert!(store.report_routes(other).await.unwrap().is_empty());
    assert!(!store.delete_report_route(other, saved.id).await.unwrap());
    assert!(store.delete_report_route(DEFAULT_ORG, saved.id).await.unwrap());
    assert!(store.report_routes(DEFAULT_ORG).await.unwrap().is_empty());
}

fn entry(step: ReclaimLogStep) -> ReclaimLogLine {
    ReclaimLogLine { step, actor: "fleetlens".into(), dollars_held: Some(1.5), at_ms: T0, detail: "d".into() }
}

async fn reclaims_log_every_step_and_commands_are_taken_once(backend: Backend) {
    let (_db, store) = open(backend).await;
    let policy = ReclaimPolicySpec {
        name: "idle".into(),
        state: WorkloadState::IdleHeld,
        for_s: 7200,
        grace_s: 900,
        action: ReclaimAction::AgentKill,
        action_channel_id: None,
        notice_channel_id: None,
        enabled: true,
    };
    let p = store.insert_reclaim_policy(DEFAULT_ORG, &policy, T0).await.unwrap().expect("new");
    assert_eq!((p.org_id, &p.policy, p.created_ms), (DEFAULT_ORG, &policy, T0));
    assert!(store.insert_reclaim_policy(DEFAULT_ORG, &policy, T0).await.unwrap().is_none(), "names are unique");
    assert_eq!(store.enabled_reclaim_policies().await.unwrap(), vec![p.clone()]);
    assert_eq!(store.reclaim_policy(DEFAULT_ORG, p.id).await.unwrap(), Some(p.clone()));

    let ch = channel(store.as_ref()).await;
    let r = ReclaimRecord {
        id: ReclaimId(0),
        org_id: DEFAULT_ORG,
        case: ReclaimCase {
            policy_id: p.id,
            gpu_uuid: "GPU-1".into(),
            host: "node-1".into(),
            run_key: "pod:ml/nb".into(),
            pid: 4242,
            owner: ProcessOwner { user: Some("bob".into()), ..Default::default() },
            state_since_ms: T0 - 7_200_000,
            noticed_ms: T0,
            snoozed_until_ms: None,
            acted_ms: None,
            closed_ms: None,
            status: ReclaimStatus::Noticed,
        },
        updated_ms: T0,
    };
    let notice = NewNotification {
        channel_id: ch,
        kind: MessageKind::ReclaimNotice,
        seq: T0,
        payload: "{\"snooze\":\"/reclaims/__RECLAIM_ID__/snooze\"}".into(),
    };
    let e = entry(ReclaimLogStep::Notice);
    let w = ReclaimWrite { log: Some(&e), notify: vec![&notice], command: None };
    let id = store.start_reclaim(&r, &w, T0).await.unwrap().expect("started");
    assert_eq!(store.start_reclaim(&r, &w, T0).await.unwrap(), None, "one open reclaim per policy and GPU");
    // The notice names its reclaim.
    let sent = store.outbox_message(DEFAULT_ORG, fleetlens_core::MessageId(1)).await.unwrap().expect("the notice");
    assert_eq!(sent.payload, format!("{{\"snooze\":\"/reclaims/{id}/snooze\"}}"));

    let open = store.open_reclaims().await.unwrap();
    assert_eq!(open.len(), 1);
    let mut acted = open[0].clone();
    assert_eq!((acted.id, acted.case.pid, acted.case.owner.user.as_deref()), (id, 4242, Some("bob")));
    acted.case.status = ReclaimStatus::Acted;
    acted.case.acted_ms = Some(T0 + 900_000);
    acted.case.closed_ms = Some(T0 + 900_000);
    let command = AgentCommand {
        id: AgentCommandId(0),
        org_id: DEFAULT_ORG,
        host: "node-1".into(),
        reclaim_id: id,
        gpu_uuid: "GPU-1".into(),
        pid: 4242,
        owner_user: "bob".into(),
        created_ms: 0,
        taken_ms: None,
        done_ms: None,
        result: None,
    };
    let e = entry(ReclaimLogStep::KillQueued);
    let w = ReclaimWrite { log: Some(&e), notify: vec![], command: Some(&command) };
    assert!(store.update_reclaim(&acted, &w, T0 + 900_000).await.unwrap());
    assert!(!store.update_reclaim(&acted, &w, T0 + 900_000).await.unwrap(), "closed reclaims stay closed");
    assert!(store.open_reclaims().await.unwrap().is_empty());

    // Commands: per host, taken once, finished once.
    assert!(store.take_agent_commands(DEFAULT_ORG, "node-2", T0).await.unwrap().is_empty());
    let taken = store.take_agent_commands(DEFAULT_ORG, "node-1", T0 + 901_000).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].pid, taken[0].owner_user.as_str(), taken[0].taken_ms), (4242, "bob", Some(T0 + 901_000)));
    assert!(store.take_agent_commands(DEFAULT_ORG, "node-1", T0 + 902_000).await.unwrap().is_empty());
    let mut killed = entry(ReclaimLogStep::Killed);
    killed.actor = "agent:node-1".into();
    killed.dollars_held = None;
    assert!(
        store.finish_agent_command(DEFAULT_ORG, taken[0].id, "node-2", "killed", &killed, T0).await.unwrap().is_none()
    );
    let done =
        store.finish_agent_command(DEFAULT_ORG, taken[0].id, "node-1", "killed", &killed, T0 + 903_000).await.unwrap();
    assert_eq!(done.map(|c| (c.result, c.done_ms)), Some((Some("killed".to_string()), Some(T0 + 903_000))));
    assert!(
        store.finish_agent_command(DEFAULT_ORG, taken[0].id, "node-1", "killed", &killed, T0).await.unwrap().is_none()
    );

    // The log: every step, newest first, with the money held.
    let log = store.reclaim_log(DEFAULT_ORG, Some(id), 100).await.unwrap();
    let steps: Vec<&str> = log.iter().map(|l| l.line.step.as_str()).collect();
    assert_eq!(steps, ["killed", "kill_queued", "notice"]);
    assert!(log.iter().all(|l| (l.org_id, l.reclaim_id) == (DEFAULT_ORG, id)), "{log:?}");
    assert_eq!(log[2].line, entry(ReclaimLogStep::Notice));
    assert_eq!(log[0].line.actor, "agent:node-1");
    assert_eq!(store.reclaims(DEFAULT_ORG, 10).await.unwrap()[0].case.status, ReclaimStatus::Acted);

    // Deleting a policy cancels its open reclaims.
    let again = store.start_reclaim(&r, &ReclaimWrite::default(), T0 + 1_000_000).await.unwrap().expect("a new one");
    assert!(store.delete_reclaim_policy(DEFAULT_ORG, p.id).await.unwrap());
    assert_eq!(store.reclaim(DEFAULT_ORG, again).await.unwrap().unwrap().case.status, ReclaimStatus::Cancelled);
    assert!(store.reclaim_policies(DEFAULT_ORG).await.unwrap().is_empty());
}
