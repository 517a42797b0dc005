//! The account store contract: every test runs against SQLite and against PostgreSQL.

use fleetlens_core::Sample;
use fleetlens_store::accounts::{
    ApiKeyId, Assigned, GpuTeam, NewSession, NewUser, Role, TeamSource, UserUpdate, expand_scopes,
};
use fleetlens_store::{DEFAULT_ORG, NewApiKey, OrgId, Scope, hash_api_key};
use fleetlens_tests::Backend;

mod common;
use common::open;

fleetlens_tests::for_each_backend!(
    teams_are_unique_per_organisation_and_scoped,
    users_round_trip_and_emails_are_unique,
    sessions_expire_and_follow_their_user,
    api_keys_keep_owner_team_and_last_use,
    key_scopes_never_exceed_the_owner_role,
    team_assignment_follows_its_precedence,
    deleting_a_team_or_user_cleans_up,
    the_bootstrap_key_follows_the_variable,
    session_use_and_key_revocation_by_user,
);

const T0: i64 = 1_790_000_000_000;

fn user<'a>(org: OrgId, email: &'a str, role: Role) -> NewUser<'a> {
    NewUser { org_id: org, email, name: "Someone", password_hash: "$argon2id$fake", role, now_ms: T0 }
}

fn key<'a>(org: OrgId, hash: &'a str, scopes: &'a [Scope]) -> NewApiKey<'a> {
    NewApiKey { org_id: org, name: "k", prefix: "flk_0000", key_hash: hash, scopes, created_ms: T0 }
}

fn samples(uuid: &str, n: i64) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample { ts_ms: T0 + i * 1000, uuid: uuid.into(), gpu_util_pct: Some(50.0), ..Default::default() })
        .collect()
}

fn team_of<'a>(gpus: &'a [GpuTeam], uuid: &str) -> &'a GpuTeam {
    gpus.iter().find(|g| g.uuid == uuid).expect("gpu listed")
}

async fn teams_are_unique_per_organisation_and_scoped(backend: Backend) {
    let (_db, store) = open(backend).await;
    let b = store.create_org("b", T0).await.unwrap();
    let ml = store.create_team(DEFAULT_ORG, "ml", T0).await.unwrap();
    let err = store.create_team(DEFAULT_ORG, "ml", T0).await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let b_ml = store.create_team(b, "ml", T0).await.expect("same name in another organisation");
    assert_ne!(ml.id, b_ml.id);

    assert_eq!(store.teams(DEFAULT_ORG).await.unwrap(), vec![ml.clone()]);
    assert_eq!(store.team(b, ml.id).await.unwrap(), None);
    assert_eq!(store.rename_team(b, ml.id, "stolen").await.unwrap(), None);
    assert!(!store.delete_team(b, ml.id).await.unwrap());
    assert_eq!(store.team(DEFAULT_ORG, ml.id).await.unwrap().unwrap().name, "ml");

    let renamed = store.rename_team(DEFAULT_ORG, ml.id, "research").await.unwrap().unwrap();
    assert_eq!(renamed.name, "research");
    let err = store.rename_team(b, b_ml.id, "ml").await;
    assert!(err.is_ok(), "b may keep its own name");

    let alice = store.create_user(user(DEFAULT_ORG, "alice@a.example", Role::Member)).await.unwrap();
    let bob = store.create_user(user(b, "bob@b.example", Role::Member)).await.unwrap();
    assert!(store.set_team_member(DEFAULT_ORG, ml.id, alice.id, true).await.unwrap());
    assert!(store.set_team_member(DEFAULT_ORG, ml.id, alice.id, true).await.unwrap(), "idempotent");
    assert!(!store.set_team_member(DEFAULT_ORG, ml.id, bob.id, true).await.unwrap(), "user of another org");
    assert!(!store.set_team_member(b, ml.id, bob.id, true).await.unwrap(), "team of another org");
    assert_eq!(store.team(DEFAULT_ORG, ml.id).await.unwrap().unwrap().members, vec![alice.id]);
    assert!(store.teams(b).await.unwrap().iter().all(|t| t.members.is_empty()));
    assert!(store.set_team_member(DEFAULT_ORG, ml.id, alice.id, false).await.unwrap());
    assert!(store.team(DEFAULT_ORG, ml.id).await.unwrap().unwrap().members.is_empty());
}

async fn users_round_trip_and_emails_are_unique(backend: Backend) {
    let (_db, store) = open(backend).await;
    let b = store.create_org("b", T0).await.unwrap();
    let admin = store.create_user(user(DEFAULT_ORG, "root@a.example", Role::Admin)).await.unwrap();
    assert_eq!(admin.role, Role::Admin);
    assert_eq!(admin.disabled_ms, None);
    let err = store.create_user(user(b, "root@a.example", Role::Viewer)).await.unwrap_err();
    assert!(err.is_conflict(), "emails are unique across organisations: {err}");

    let (found, hash) = store.user_for_login("root@a.example").await.unwrap().unwrap();
    assert_eq!(found, admin);
    assert_eq!(hash, "$argon2id$fake");
    assert!(store.user_for_login("nobody@a.example").await.unwrap().is_none());
    assert_eq!(store.users(DEFAULT_ORG).await.unwrap(), vec![admin.clone()]);
    assert!(store.users(b).await.unwrap().is_empty());
    assert_eq!(store.user(b, admin.id).await.unwrap(), None);
    assert_eq!(store.update_user(b, admin.id, &UserUpdate::default(), T0).await.unwrap(), None);
    assert!(!store.delete_user(b, admin.id, T0).await.unwrap());
    assert_eq!(store.count_admins(DEFAULT_ORG).await.unwrap(), 1);
    assert_eq!(store.count_admins(b).await.unwrap(), 0);

    let update = UserUpdate {
        name: Some("Root".into()),
        role: Some(Role::Viewer),
        password_hash: Some("$argon2id$new".into()),
        disabled: Some(true),
    };
    let changed = store.update_user(DEFAULT_ORG, admin.id, &update, T0 + 5).await.unwrap().unwrap();
    assert_eq!((changed.name.as_str(), changed.role, changed.disabled_ms), ("Root", Role::Viewer, Some(T0 + 5)));
    assert_eq!(changed.updated_ms, T0 + 5);
    assert_eq!(store.user_for_login("root@a.example").await.unwrap().unwrap().1, "$argon2id$new");
    assert_eq!(store.count_admins(DEFAULT_ORG).await.unwrap(), 0);
    // Disabling again keeps the first time; an empty update changes nothing but the time.
    let again = UserUpdate { disabled: Some(true), ..Default::default() };
    let same = store.update_user(DEFAULT_ORG, admin.id, &again, T0 + 9).await.unwrap().unwrap();
    assert_eq!(same.disabled_ms, Some(T0 + 5));
    assert_eq!(same.role, Role::Viewer);
    let enable = UserUpdate { disabled: Some(false), ..Default::default() };
    assert_eq!(store.update_user(DEFAULT_ORG, admin.id, &enable, T0).await.unwrap().unwrap().disabled_ms, None);
}

async fn sessions_expire_and_follow_their_user(backend: Backend) {
    let (_db, store) = open(backend).await;
    let u = store.create_user(user(DEFAULT_ORG, "s@a.example", Role::Member)).await.unwrap();
    let session = |token: &'static str, expires_ms: i64| NewSession {
        token_hash: token,
        user_id: u.id,
        org_id: DEFAULT_ORG,
        csrf_token: "csrf-1",
        created_ms: T0,
        expires_ms,
    };
    store.create_session(session("h1", T0 + 1000)).await.unwrap();
    store.create_session(session("h2", T0 + 1000)).await.unwrap();
    let s = store.session("h1", T0 + 10).await.unwrap().unwrap();
    assert_eq!(
        (s.user.id, s.user.role, s.csrf_token.as_str(), s.expires_ms),
        (u.id, Role::Member, "csrf-1", T0 + 1000)
    );
    assert_eq!(s.user.last_login_ms, Some(T0));
    assert!(store.session("h1", T0 + 1000).await.unwrap().is_none(), "expired");
    assert!(store.session("nope", T0).await.unwrap().is_none());

    // The role is read with the session: a change applies at once.
    let demote = UserUpdate { role: Some(Role::Viewer), ..Default::default() };
    store.update_user(DEFAULT_ORG, u.id, &demote, T0).await.unwrap();
    assert_eq!(store.session("h1", T0).await.unwrap().unwrap().user.role, Role::Viewer);
    let disable = UserUpdate { disabled: Some(true), ..Default::default() };
    store.update_user(DEFAULT_ORG, u.id, &disable, T0).await.unwrap();
    assert!(store.session("h1", T0).await.unwrap().is_none(), "a disabled user has no session");
    let enable = UserUpdate { disabled: Some(false), ..Default::default() };
    store.update_user(DEFAULT_ORG, u.id, &enable, T0).await.unwrap();

    let other = store.create_org("other", T0).await.unwrap();
    assert_eq!(store.delete_sessions_of(other, u.id, None).await.unwrap(), 0, "not another organisation's user");
    assert_eq!(store.delete_sessions_of(DEFAULT_ORG, u.id, Some("h2")).await.unwrap(), 1);
    assert!(store.session("h1", T0).await.unwrap().is_none());
    assert!(store.session("h2", T0).await.unwrap().is_some());
    store.delete_session("h2").await.unwrap();
    assert!(store.session("h2", T0).await.unwrap().is_none());

    // A login drops the expired sessions.
    store.create_session(session("old", T0 + 1)).await.unwrap();
    store.create_session(NewSession { created_ms: T0 + 2, ..session("new", T0 + 5000) }).await.unwrap();
    assert!(store.session("old", 0).await.unwrap().is_none(), "purged, not only expired");
}

async fn api_keys_keep_owner_team_and_last_use(backend: Backend) {
    let (_db, store) = open(backend).await;
    let b = store.create_org("b", T0).await.unwrap();
    let u = store.create_user(user(DEFAULT_ORG, "k@a.example", Role::Member)).await.unwrap();
    let team = store.create_team(DEFAULT_ORG, "infra", T0).await.unwrap();
    let h1 = hash_api_key("flk_secret_one");
    let mine = store.create_api_key(key(DEFAULT_ORG, &h1, &[Scope::Ingest]), Some(u.id), Some(team.id)).await.unwrap();
    assert_eq!((mine.user_id, mine.team_id, mine.last_used_ms), (Some(u.id), Some(team.id), None));
    let h2 = hash_api_key("flk_secret_two");
    let service = store.create_api_key(key(DEFAULT_ORG, &h2, &[Scope::Read]), None, None).await.unwrap();
    let h3 = hash_api_key("flk_secret_three");
    let other = store.create_api_key(key(b, &h3, &[Scope::Admin]), None, None).await.unwrap();

    let all: Vec<ApiKeyId> = store.api_keys(DEFAULT_ORG, None).await.unwrap().iter().map(|k| k.key.id).collect();
    assert_eq!(all, vec![mine.key.id, service.key.id]);
    let own: Vec<ApiKeyId> = store.api_keys(DEFAULT_ORG, Some(u.id)).await.unwrap().iter().map(|k| k.key.id).collect();
    assert_eq!(own, vec![mine.key.id]);
    assert_eq!(store.api_key(DEFAULT_ORG, mine.key.id).await.unwrap().unwrap(), mine);
    assert_eq!(store.api_key(DEFAULT_ORG, other.key.id).await.unwrap(), None);
    assert_eq!(store.revoke_api_key(DEFAULT_ORG, other.key.id, T0).await.unwrap(), None);
    assert_eq!(store.api_key_auth(&h3).await.unwrap().unwrap().info.key.revoked_ms, None, "b's key untouched");

    let auth = store.api_key_auth(&h1).await.unwrap().unwrap();
    assert_eq!(auth.info, mine);
    assert_eq!((auth.owner_role, auth.owner_disabled), (Some(Role::Member), false));
    assert!(store.api_key_auth(&hash_api_key("flk_unknown")).await.unwrap().is_none());

    store.touch_api_key(DEFAULT_ORG, mine.key.id, T0 + 100).await.unwrap();
    store.touch_api_key(DEFAULT_ORG, mine.key.id, T0 + 50).await.unwrap();
    store.touch_api_key(b, mine.key.id, T0 + 150).await.unwrap();
    assert_eq!(
        store.api_key(DEFAULT_ORG, mine.key.id).await.unwrap().unwrap().last_used_ms,
        Some(T0 + 100),
        "only a later use of the key's own organisation counts"
    );

    let revoked = store.revoke_api_key(DEFAULT_ORG, mine.key.id, T0 + 200).await.unwrap().unwrap();
    assert_eq!(revoked.key.revoked_ms, Some(T0 + 200));
    let again = store.revoke_api_key(DEFAULT_ORG, mine.key.id, T0 + 300).await.unwrap().unwrap();
    assert_eq!(again.key.revoked_ms, Some(T0 + 200), "the first revocation time stays");
    assert!(store.api_key_auth(&h1).await.unwrap().unwrap().effective_scopes().is_empty());
    // The Store view of the same key agrees.
    assert_eq!(store.api_key_by_hash(&h1).await.unwrap().unwrap().revoked_ms, Some(T0 + 200));
}

async fn key_scopes_never_exceed_the_owner_role(backend: Backend) {
    let (_db, store) = open(backend).await;
    let u = store.create_user(user(DEFAULT_ORG, "boss@a.example", Role::Admin)).await.unwrap();
    let h = hash_api_key("flk_admin_of_boss");
    store.create_api_key(key(DEFAULT_ORG, &h, &[Scope::Admin]), Some(u.id), None).await.unwrap();
    let scopes = |s: Vec<Scope>| {
        let mut v: Vec<&str> = s.iter().map(|s| s.as_str()).collect();
        v.sort();
        v
    };
    let auth = store.api_key_auth(&h).await.unwrap().unwrap();
    assert_eq!(scopes(auth.effective_scopes()), vec!["admin", "ingest", "read"]);
    for (role, expect) in [(Role::Member, vec!["ingest", "read"]), (Role::Viewer, vec!["read"])] {
        let change = UserUpdate { role: Some(role), ..Default::default() };
        store.update_user(DEFAULT_ORG, u.id, &change, T0).await.unwrap();
        let auth = store.api_key_auth(&h).await.unwrap().unwrap();
        assert_eq!(scopes(auth.effective_scopes()), expect, "{role:?}");
    }
    let disable = UserUpdate { disabled: Some(true), ..Default::default() };
    store.update_user(DEFAULT_ORG, u.id, &disable, T0).await.unwrap();
    let auth = store.api_key_auth(&h).await.unwrap().unwrap();
    assert!(auth.owner_disabled);
    assert!(auth.effective_scopes().is_empty());
    // A key without an owner (made with an admin key) has no owner to disable or limit it.
    let service = hash_api_key("flk_service");
    store.create_api_key(key(DEFAULT_ORG, &service, &[Scope::Read, Scope::Ingest]), None, None).await.unwrap();
    let auth = store.api_key_auth(&service).await.unwrap().unwrap();
    assert_eq!((auth.owner_role, auth.owner_disabled), (None, false));
    assert_eq!(scopes(auth.effective_scopes()), vec!["ingest", "read"]);
    assert_eq!(scopes(expand_scopes(&[Scope::Read, Scope::Read])), vec!["read"]);
}

async fn team_assignment_follows_its_precedence(backend: Backend) {
    let (_db, store) = open(backend).await;
    let b = store.create_org("b", T0).await.unwrap();
    store.ingest(DEFAULT_ORG, "node-1", [samples("GPU-a", 3), samples("GPU-b", 3)].concat()).await.unwrap();
    store.ingest(b, "node-1", samples("GPU-z", 3)).await.unwrap();

    // Nothing to go by: nothing assigned, nothing written.
    assert_eq!(store.assign_ingest_team(DEFAULT_ORG, "node-1", None, None, T0).await.unwrap(), None);
    assert!(store.gpu_teams(DEFAULT_ORG).await.unwrap().iter().all(|g| g.team_id.is_none()));

    // A label names a team, created on first sight.
    let labelled = store.assign_ingest_team(DEFAULT_ORG, "node-1", None, Some("vision"), T0).await.unwrap().unwrap();
    let vision = store.teams(DEFAULT_ORG).await.unwrap();
    assert_eq!(vision.len(), 1);
    assert_eq!((vision[0].id, vision[0].name.as_str()), (labelled, "vision"));
    let gpus = store.gpu_teams(DEFAULT_ORG).await.unwrap();
    for uuid in ["GPU-a", "GPU-b"] {
        let g = team_of(&gpus, uuid);
        assert_eq!(
            (g.team_id, g.team_name.as_deref(), g.source),
            (Some(labelled), Some("vision"), Some(TeamSource::Label))
        );
    }
    assert!(store.gpu_teams(b).await.unwrap()[0].team_id.is_none(), "b's GPU on a host of the same name untouched");
    assert!(store.teams(b).await.unwrap().is_empty());
    // Same label again: the same team.
    assert_eq!(
        store.assign_ingest_team(DEFAULT_ORG, "node-1", None, Some("vision"), T0).await.unwrap(),
        Some(labelled)
    );

    // The key's team wins over the label; a team of another organisation is ignored.
    let infra = store.create_team(DEFAULT_ORG, "infra", T0).await.unwrap();
    let b_team = store.create_team(b, "b-team", T0).await.unwrap();
    assert_eq!(
        store.assign_ingest_team(DEFAULT_ORG, "node-1", Some(b_team.id), Some("vision"), T0).await.unwrap(),
        Some(labelled)
    );
    assert_eq!(
        store.assign_ingest_team(DEFAULT_ORG, "node-1", Some(infra.id), Some("vision"), T0).await.unwrap(),
        Some(infra.id)
    );
    let g = store.gpu_teams(DEFAULT_ORG).await.unwrap();
    assert_eq!((team_of(&g, "GPU-a").team_id, team_of(&g, "GPU-a").source), (Some(infra.id), Some(TeamSource::Key)));

    // An admin's host assignment wins over the key, also for GPUs the host reports later.
    let ops = store.create_team(DEFAULT_ORG, "ops", T0).await.unwrap();
    assert_eq!(store.set_host_team(DEFAULT_ORG, "node-1", Some(ops.id), T0).await.unwrap(), Assigned::Done);
    store.ingest(DEFAULT_ORG, "node-1", samples("GPU-c", 2)).await.unwrap();
    assert_eq!(
        store.assign_ingest_team(DEFAULT_ORG, "node-1", Some(infra.id), Some("vision"), T0).await.unwrap(),
        Some(ops.id)
    );
    let g = store.gpu_teams(DEFAULT_ORG).await.unwrap();
    for uuid in ["GPU-a", "GPU-b", "GPU-c"] {
        assert_eq!(
            (team_of(&g, uuid).team_id, team_of(&g, uuid).source),
            (Some(ops.id), Some(TeamSource::Host)),
            "{uuid}"
        );
    }
    let hosts = store.hosts(DEFAULT_ORG).await.unwrap();
    assert_eq!(hosts.len(), 1);
    assert_eq!((hosts[0].host.as_str(), hosts[0].assigned_team_id, hosts[0].gpus.len()), ("node-1", Some(ops.id), 3));
    assert_eq!(store.hosts(b).await.unwrap()[0].assigned_team_id, None);

    // An admin's GPU assignment wins over everything.
    assert_eq!(store.set_gpu_team(DEFAULT_ORG, "GPU-a", Some(vision[0].id)).await.unwrap(), Assigned::Done);
    store.assign_ingest_team(DEFAULT_ORG, "node-1", Some(infra.id), None, T0).await.unwrap();
    let g = store.gpu_teams(DEFAULT_ORG).await.unwrap();
    assert_eq!((team_of(&g, "GPU-a").team_id, team_of(&g, "GPU-a").source), (Some(labelled), Some(TeamSource::Gpu)));
    assert_eq!(team_of(&g, "GPU-b").team_id, Some(ops.id));

    // Across organisations: no such host, GPU or team.
    assert_eq!(store.set_host_team(b, "node-2", Some(b_team.id), T0).await.unwrap(), Assigned::NoTarget);
    assert_eq!(store.set_host_team(DEFAULT_ORG, "node-1", Some(b_team.id), T0).await.unwrap(), Assigned::NoTeam);
    assert_eq!(store.set_gpu_team(b, "GPU-a", Some(b_team.id)).await.unwrap(), Assigned::NoTarget);
    assert_eq!(store.set_gpu_team(DEFAULT_ORG, "GPU-b", Some(b_team.id)).await.unwrap(), Assigned::NoTeam);
    assert!(store.gpu_teams(b).await.unwrap()[0].team_id.is_none());

    // Clearing: the GPU follows its host again; a host without assignment keeps nothing of it.
    assert_eq!(store.set_gpu_team(DEFAULT_ORG, "GPU-a", None).await.unwrap(), Assigned::Done);
    let g = store.gpu_teams(DEFAULT_ORG).await.unwrap();
    assert_eq!((team_of(&g, "GPU-a").team_id, team_of(&g, "GPU-a").source), (Some(ops.id), Some(TeamSource::Host)));
    assert_eq!(store.set_host_team(DEFAULT_ORG, "node-1", None, T0).await.unwrap(), Assigned::Done);
    assert!(store.gpu_teams(DEFAULT_ORG).await.unwrap().iter().all(|g| g.team_id.is_none() && g.source.is_none()));
    assert_eq!(store.hosts(DEFAULT_ORG).await.unwrap()[0].assigned_team_id, None);
    assert_eq!(
        store.assign_ingest_team(DEFAULT_ORG, "node-1", None, Some("vision"), T0).await.unwrap(),
        Some(labelled)
    );
    assert!(store.gpu_teams(DEFAULT_ORG).await.unwrap().iter().all(|g| g.team_id == Some(labelled)));
}

async fn deleting_a_team_or_user_cleans_up(backend: Backend) {
    let (_db, store) = open(backend).await;
    store.ingest(DEFAULT_ORG, "node-1", samples("GPU-a", 2)).await.unwrap();
    let team = store.create_team(DEFAULT_ORG, "doomed", T0).await.unwrap();
    let u = store.create_user(user(DEFAULT_ORG, "gone@a.example", Role::Member)).await.unwrap();
    store.set_team_member(DEFAULT_ORG, team.id, u.id, true).await.unwrap();
    let h = hash_api_key("flk_doomed");
    let k = store.create_api_key(key(DEFAULT_ORG, &h, &[Scope::Ingest]), Some(u.id), Some(team.id)).await.unwrap();
    store.set_host_team(DEFAULT_ORG, "node-1", Some(team.id), T0).await.unwrap();
    store
        .create_session(NewSession {
            token_hash: "sess",
            user_id: u.id,
            org_id: DEFAULT_ORG,
            csrf_token: "c",
            created_ms: T0,
            expires_ms: T0 + 10_000,
        })
        .await
        .unwrap();

    assert!(store.delete_team(DEFAULT_ORG, team.id).await.unwrap());
    assert!(store.teams(DEFAULT_ORG).await.unwrap().is_empty());
    assert!(store.gpu_teams(DEFAULT_ORG).await.unwrap().iter().all(|g| g.team_id.is_none()));
    assert_eq!(store.hosts(DEFAULT_ORG).await.unwrap()[0].assigned_team_id, None);
    assert_eq!(store.api_key(DEFAULT_ORG, k.key.id).await.unwrap().unwrap().team_id, None);

    assert!(store.delete_user(DEFAULT_ORG, u.id, T0 + 7).await.unwrap());
    assert!(store.user(DEFAULT_ORG, u.id).await.unwrap().is_none());
    assert!(store.session("sess", T0).await.unwrap().is_none());
    assert_eq!(store.api_key(DEFAULT_ORG, k.key.id).await.unwrap().unwrap().key.revoked_ms, Some(T0 + 7));
    assert!(store.user_for_login("gone@a.example").await.unwrap().is_none());
}

async fn the_bootstrap_key_follows_the_variable(backend: Backend) {
    let (_db, store) = open(backend).await;
    let (h1, h2) = (hash_api_key("bootstrap-1"), hash_api_key("bootstrap-2"));
    let ordinary = hash_api_key("ordinary");
    store.create_api_key(key(DEFAULT_ORG, &ordinary, &[Scope::Admin]), None, None).await.unwrap();
    let live = |hash: String| {
        let store = store.clone();
        async move { store.api_key_auth(&hash).await.unwrap().is_some_and(|k| k.info.key.revoked_ms.is_none()) }
    };

    let synced = store.sync_bootstrap_key(Some(key(DEFAULT_ORG, &h1, &[Scope::Admin])), T0).await.unwrap();
    assert_eq!((synced.revoked, synced.current_revoked), (0, false));
    let again = store.sync_bootstrap_key(Some(key(DEFAULT_ORG, &h1, &[Scope::Admin])), T0 + 1).await.unwrap();
    assert_eq!((again.revoked, again.current_revoked), (0, false), "idempotent");
    assert!(live(h1.clone()).await);

    let changed = store.sync_bootstrap_key(Some(key(DEFAULT_ORG, &h2, &[Scope::Admin])), T0 + 2).await.unwrap();
    assert_eq!(changed.revoked, 1);
    assert!(!live(h1.clone()).await && live(h2.clone()).await);
    let removed = store.sync_bootstrap_key(None, T0 + 3).await.unwrap();
    assert_eq!(removed.revoked, 1);
    assert!(!live(h2.clone()).await);
    assert!(live(ordinary.clone()).await, "ordinary keys are never touched");
    // A revoked value stays revoked; an ordinary key's secret is refused.
    let back = store.sync_bootstrap_key(Some(key(DEFAULT_ORG, &h2, &[Scope::Admin])), T0 + 4).await.unwrap();
    assert!(back.current_revoked && !live(h2).await);
    assert!(store.sync_bootstrap_key(Some(key(DEFAULT_ORG, &ordinary, &[Scope::Admin])), T0 + 5).await.is_err());
}

async fn session_use_and_key_revocation_by_user(backend: Backend) {
    let (_db, store) = open(backend).await;
    let u = store.create_user(user(DEFAULT_ORG, "u@x", Role::Member)).await.unwrap();
    let other = store.create_user(user(DEFAULT_ORG, "o@x", Role::Member)).await.unwrap();
    let session = NewSession {
        token_hash: "s1",
        user_id: u.id,
        org_id: DEFAULT_ORG,
        csrf_token: "c",
        created_ms: T0,
        expires_ms: T0 + 1_000_000,
    };
    store.create_session(session).await.unwrap();
    assert_eq!(store.session("s1", T0).await.unwrap().unwrap().last_seen_ms, T0, "a new session was just used");
    store.touch_session("s1", T0 + 500).await.unwrap();
    store.touch_session("s1", T0 + 100).await.unwrap();
    assert_eq!(store.session("s1", T0 + 600).await.unwrap().unwrap().last_seen_ms, T0 + 500, "never moves back");

    let (k1, k2, k3) = (hash_api_key("k1"), hash_api_key("k2"), hash_api_key("k3"));
    store.create_api_key(key(DEFAULT_ORG, &k1, &[Scope::Read]), Some(u.id), None).await.unwrap();
    store.create_api_key(key(DEFAULT_ORG, &k2, &[Scope::Ingest]), Some(u.id), None).await.unwrap();
    store.create_api_key(key(DEFAULT_ORG, &k3, &[Scope::Read]), Some(other.id), None).await.unwrap();
    let b = store.create_org("b", T0).await.unwrap();
    assert_eq!(store.revoke_api_keys_of(b, u.id, T0).await.unwrap(), 0, "another organisation revokes nothing");
    assert_eq!(store.revoke_api_keys_of(DEFAULT_ORG, u.id, T0).await.unwrap(), 2);
    assert_eq!(store.revoke_api_keys_of(DEFAULT_ORG, u.id, T0 + 1).await.unwrap(), 0);
    let keys = store.api_keys(DEFAULT_ORG, None).await.unwrap();
    let revoked: Vec<bool> = keys.iter().map(|k| k.key.revoked_ms.is_some()).collect();
    assert_eq!(revoked, vec![true, true, false]);
    assert_eq!(keys[0].key.revoked_ms, Some(T0), "the first revocation time is kept");
}
