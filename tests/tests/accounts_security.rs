//! Black box: the hardening of accounts (issue 19, items 7, 9, 10 and part of 11) on the real
//! server binary, on SQLite and PostgreSQL: the bootstrap admin and token across restarts,
//! placeholder and short secrets refused at start, the login limits (per account, IPv6 by
//! /64), the password-hashing gate, password changes, idle sessions, security headers, key
//! teams of members and user creation across organisations.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetlens_tests::accounts::{
    ADMIN_EMAIL, ADMIN_PASSWORD, Auth, Resp, Session, admin, get, login, post, put, send, spawn, start, try_login,
    try_login_from,
};
use fleetlens_tests::{Backend, TestDatabase, TestServer, bin_path};
use serde_json::{Value, json};

fleetlens_tests::for_each_backend!(
    the_bootstrap_admin_is_reset_only_with_the_flag,
    the_bootstrap_token_is_revoked_when_changed_or_removed,
    placeholder_and_short_secrets_stop_the_server,
    logins_are_limited_per_account_and_per_ipv6_64,
    password_hashing_is_bounded,
    password_changes_are_rate_limited_and_can_revoke_keys,
    idle_sessions_end,
    every_answer_carries_the_security_headers,
    members_attach_keys_only_to_their_teams,
    user_creation_does_not_tell_other_organisations_emails,
);

/// A user of the default organisation, made by the admin key; returns its id.
async fn add_user(server: &TestServer, email: &str, password: &str, role: &str) -> i64 {
    let r = post(server, "/api/v1/users", &admin(), json!({"email": email, "password": password, "role": role})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body["id"].as_i64().unwrap()
}

async fn change_password(server: &TestServer, s: &Session, current: &str, new: &str, revoke: Option<bool>) -> Resp {
    let mut body = json!({"current_password": current, "new_password": new});
    if let Some(r) = revoke {
        body["revoke_api_keys"] = json!(r);
    }
    put(server, "/api/v1/auth/password", &Auth::Session(s.clone()), body).await
}

async fn the_bootstrap_admin_is_reset_only_with_the_flag(backend: Backend) {
    let (db, mut server) = start(backend, &[]).await;
    let s = login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let changed = change_password(&server, &s, ADMIN_PASSWORD, "changed-in-the-dashboard", None).await;
    assert_eq!(changed.status, 204, "{}", changed.text);
    // The admin also demotes nothing and disables nothing here; a restart with the same or
    // another FLEETLENS_ADMIN_PASSWORD must keep the password the user chose.
    server.kill();
    let mut server = spawn(&db, &["--admin-password", "another-bootstrap-password"], &[]);
    assert_eq!(try_login(&server, ADMIN_EMAIL, "another-bootstrap-password").await.status, 401);
    assert_eq!(try_login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await.status, 401);
    login(&server, ADMIN_EMAIL, "changed-in-the-dashboard").await;
    server.kill();

    // The explicit flag (or its variable) resets it.
    let server = spawn(
        &db,
        &["--admin-password", "another-bootstrap-password"],
        &[("FLEETLENS_RESET_ADMIN_PASSWORD", Some("true"))],
    );
    assert_eq!(try_login(&server, ADMIN_EMAIL, "changed-in-the-dashboard").await.status, 401);
    login(&server, ADMIN_EMAIL, "another-bootstrap-password").await;
}

async fn the_bootstrap_token_is_revoked_when_changed_or_removed(backend: Backend) {
    let (db, mut server) = start(backend, &[]).await;
    assert_eq!(get(&server, "/api/v1/auth/me", &admin()).await.status, 200);
    server.kill();

    let second = "fl_second_bootstrap_token_0123456789abcdef";
    let mut server = spawn(&db, &[], &[("FLEETLENS_ADMIN_TOKEN", Some(second))]);
    let old = get(&server, "/api/v1/auth/me", &admin()).await;
    assert_eq!(old.status, 401, "the earlier token is revoked: {}", old.text);
    assert_eq!(get(&server, "/api/v1/auth/me", &Auth::Key(second.into())).await.status, 200);
    server.kill();

    let server = spawn(&db, &[], &[("FLEETLENS_ADMIN_TOKEN", None)]);
    assert_eq!(get(&server, "/api/v1/auth/me", &Auth::Key(second.into())).await.status, 401);
    assert_eq!(get(&server, "/api/v1/auth/me", &admin()).await.status, 401);
    // The keys list says so (the admin logs in with the password instead).
    let s = Auth::Session(login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await);
    let keys = get(&server, "/api/v1/api-keys", &s).await.body;
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|k| k["revoked"] == true), "{keys:?}");
}

/// Runs the server with `env` and expects it to exit with an error that contains `needles`.
fn refuses_to_start(db: &TestDatabase, args: &[&str], env: &[(&str, &str)], needles: &[&str]) {
    let mut cmd = Command::new(bin_path("fleetlens-server"));
    cmd.args(["--listen", "127.0.0.1:0", "--database-url", &db.url, "--static-dir", "/nonexistent-static"])
        .args(args)
        .env_remove("FLEETLENS_ADMIN_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started with {args:?} {env:?}: it must refuse");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
}

async fn placeholder_and_short_secrets_stop_the_server(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let ok_admin = ["--admin-email", ADMIN_EMAIL, "--admin-password", ADMIN_PASSWORD];
    refuses_to_start(
        &db,
        &ok_admin,
        &[("FLEETLENS_ADMIN_TOKEN", "fl_short_token_123")],
        &["invalid configuration", "FLEETLENS_ADMIN_TOKEN", "fewer than 32"],
    );
    refuses_to_start(
        &db,
        &ok_admin,
        &[("FLEETLENS_ADMIN_TOKEN", "CHANGE-ME-CHANGE-ME-CHANGE-ME-CHANGE-ME")],
        &["FLEETLENS_ADMIN_TOKEN", "placeholder"],
    );
    for (password, why) in [("CHANGE-ME", "placeholder"), ("changeme", "placeholder"), ("password", "well-known")] {
        refuses_to_start(
            &db,
            &[],
            &[("FLEETLENS_ADMIN_EMAIL", "admin@example.com"), ("FLEETLENS_ADMIN_PASSWORD", password)],
            &["FLEETLENS_ADMIN_PASSWORD", why],
        );
    }
    refuses_to_start(
        &db,
        &["--admin-email", ADMIN_EMAIL, "--admin-password", "short-pass1"],
        &[],
        &["FLEETLENS_ADMIN_PASSWORD", "shorter than 12"],
    );
    // Nothing was created by the refused starts; a proper configuration starts.
    let server = spawn(&db, &[], &[]);
    login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let users = get(&server, "/api/v1/users", &admin()).await.body;
    assert_eq!(users.as_array().unwrap().len(), 1, "{users}");
}

async fn logins_are_limited_per_account_and_per_ipv6_64(backend: Backend) {
    let (_db, server) =
        start(backend, &["--trust-forwarded-for", "true", "--login-attempts", "2", "--login-account-attempts", "4"])
            .await;
    // IPv6: the addresses of one /64 are one client.
    for ip in ["2001:db8:1:2::1", "2001:db8:1:2::2"] {
        assert_eq!(try_login_from(&server, "x@a.example", "wrong-password", ip).await.status, 401, "{ip}");
    }
    let same_64 = try_login_from(&server, "x@a.example", "wrong-password", "2001:db8:1:2:ffff::3").await;
    assert_eq!(same_64.status, 429, "another address of the same /64: {}", same_64.text);
    assert_eq!(try_login_from(&server, "x@a.example", "wrong-password", "2001:db8:1:3::1").await.status, 401);

    // Per account: four failures from four addresses spend the account's attempts; a fifth
    // address is refused too, even with the right password.
    for i in 1..=4 {
        let ip = format!("10.0.0.{i}");
        assert_eq!(try_login_from(&server, ADMIN_EMAIL, "wrong-password", &ip).await.status, 401, "{ip}");
    }
    let r = try_login_from(&server, ADMIN_EMAIL, ADMIN_PASSWORD, "10.0.0.99").await;
    assert_eq!((r.status, r.body["error"]["code"].as_str()), (429, Some("rate_limited")), "{}", r.text);
    assert!(r.headers.get("retry-after").is_some());
    // Another account is not affected.
    assert_eq!(try_login_from(&server, "y@a.example", "wrong-password", "10.0.0.99").await.status, 401);
}

async fn password_hashing_is_bounded(backend: Backend) {
    let (_db, server) = start(backend, &["--trust-forwarded-for", "true", "--password-hash-concurrency", "1"]).await;
    // 48 logins at once, each from its own address for its own email (no rate limit applies):
    // one hash runs, one waits, the others are told to come back.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..48 {
        let url = server.url("/api/v1/auth/login");
        tasks.spawn(async move {
            let r = reqwest::Client::new()
                .post(url)
                .header("x-forwarded-for", format!("10.1.0.{i}"))
                .json(&json!({"email": format!("user{i}@a.example"), "password": "wrong-password"}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let text = r.text().await.unwrap();
            Resp { status, headers, body: serde_json::from_str(&text).unwrap_or(Value::Null), text }
        });
    }
    let answers: Vec<Resp> = tasks.join_all().await;
    let busy: Vec<&Resp> = answers.iter().filter(|r| r.status == 503).collect();
    assert!(!busy.is_empty(), "no request was turned away: {:?}", answers.iter().map(|r| r.status).collect::<Vec<_>>());
    for r in &busy {
        assert_eq!(r.body["error"]["code"], "busy", "{}", r.text);
        assert_eq!(r.headers.get("retry-after").unwrap(), "1");
    }
    assert!(answers.iter().all(|r| r.status == 401 || r.status == 503), "{:?}", answers);
    assert!(answers.iter().any(|r| r.status == 401), "some were checked");
    // Once the burst is over, logins work.
    login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await;
}

async fn password_changes_are_rate_limited_and_can_revoke_keys(backend: Backend) {
    let (_db, server) = start(backend, &["--login-attempts", "3"]).await;
    add_user(&server, "guess@a.example", "guess-password-1", "member").await;
    let s = login(&server, "guess@a.example", "guess-password-1").await;
    for i in 0..3 {
        let r = change_password(&server, &s, &format!("guess-{i}"), "new-password-123", None).await;
        assert_eq!((r.status, r.body["error"]["field"].as_str()), (422, Some("current_password")), "{}", r.text);
    }
    let r = change_password(&server, &s, "guess-password-1", "new-password-123", None).await;
    assert_eq!((r.status, r.body["error"]["code"].as_str()), (429, Some("rate_limited")), "{}", r.text);
    assert!(r.headers.get("retry-after").is_some());
    // The same attempts as a login: a stolen session cannot buy fresh guesses there either.
    assert_eq!(try_login(&server, "guess@a.example", "guess-password-1").await.status, 429);

    // revoke_api_keys: the user's keys stop working; without it they keep working.
    add_user(&server, "keys@a.example", "keys-password-1", "member").await;
    let s = login(&server, "keys@a.example", "keys-password-1").await;
    let k =
        post(&server, "/api/v1/api-keys", &Auth::Session(s.clone()), json!({"name": "mine", "scopes": ["read"]})).await;
    assert_eq!(k.status, 201, "{}", k.text);
    let key = Auth::Key(k.body["key"].as_str().unwrap().to_string());
    let other =
        post(&server, "/api/v1/api-keys", &admin(), json!({"name": "someone else's", "scopes": ["read"]})).await;
    let other = Auth::Key(other.body["key"].as_str().unwrap().to_string());
    assert_eq!(change_password(&server, &s, "keys-password-1", "keys-password-2", Some(false)).await.status, 204);
    assert_eq!(get(&server, "/api/v1/gpus", &key).await.status, 200, "kept without revoke_api_keys");
    let r = change_password(&server, &s, "keys-password-2", "keys-password-3", Some(true)).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(get(&server, "/api/v1/gpus", &key).await.status, 401, "revoked with the password change");
    assert_eq!(get(&server, "/api/v1/gpus", &other).await.status, 200, "only the user's own keys");
    assert_eq!(get(&server, "/api/v1/auth/me", &Auth::Session(s)).await.status, 200, "this session stays");
    login(&server, "keys@a.example", "keys-password-3").await;
}

async fn idle_sessions_end(backend: Backend) {
    let (_db, server) = start(backend, &["--session-idle-timeout", "2s"]).await;
    let s = Auth::Session(login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await);
    // In use for longer than the timeout: alive.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let r = get(&server, "/api/v1/auth/me", &s).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let r = get(&server, "/api/v1/auth/me", &s).await;
    assert_eq!((r.status, r.body["error"]["code"].as_str()), (401, Some("unauthenticated")), "{}", r.text);
    // A new login works.
    let s = Auth::Session(login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await);
    assert_eq!(get(&server, "/api/v1/auth/me", &s).await.status, 200);
}

fn assert_security_headers(r: &Resp, what: &str, hsts: bool) {
    let h = |name: &str| r.headers.get(name).map(|v| v.to_str().unwrap().to_string());
    let csp = h("content-security-policy").unwrap_or_else(|| panic!("{what}: no CSP"));
    for directive in [
        "default-src 'self'",
        "script-src 'self' 'wasm-unsafe-eval'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
    ] {
        assert!(csp.contains(directive), "{what}: {directive} not in {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("'unsafe-eval'"), "{what}: {csp}");
    assert_eq!(h("x-content-type-options").as_deref(), Some("nosniff"), "{what}");
    assert_eq!(h("x-frame-options").as_deref(), Some("DENY"), "{what}");
    assert_eq!(h("referrer-policy").as_deref(), Some("no-referrer"), "{what}");
    assert_eq!(h("strict-transport-security").is_some(), hsts, "{what}: HSTS {:?}", h("strict-transport-security"));
}

async fn every_answer_carries_the_security_headers(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "<!doctype html><script type=module src=/boot.js></script>\n")
        .unwrap();
    std::fs::write(dir.path().join("boot.js"), "console.log('fleetlens');\n").unwrap();
    let static_dir = dir.path().to_str().unwrap();
    let (db, mut server) = start(backend, &["--static-dir", static_dir]).await;
    for (path, auth, status) in [
        ("/", Auth::None, 200),
        ("/gpus", Auth::None, 200),
        ("/boot.js", Auth::None, 200),
        ("/api/v1/gpus", admin(), 200),
        ("/api/v1/gpus", Auth::None, 401),
        ("/api/v1/no-such-thing", admin(), 404),
        ("/healthz", Auth::None, 200),
        ("/metrics", admin(), 200),
    ] {
        let r = get(&server, path, &auth).await;
        assert_eq!(r.status, status, "{path}: {}", r.text);
        assert_security_headers(&r, path, true);
    }
    let r = try_login(&server, ADMIN_EMAIL, "wrong-password").await;
    assert_security_headers(&r, "failed login", true);
    server.kill();

    // Plain http (--cookie-secure false): no HSTS, the rest as before.
    let server = spawn(&db, &["--static-dir", static_dir, "--cookie-secure", "false"], &[]);
    for path in ["/", "/api/v1/gpus"] {
        let r = get(&server, path, &admin()).await;
        assert_security_headers(&r, path, false);
    }
}

async fn members_attach_keys_only_to_their_teams(backend: Backend) {
    let (_db, server) = start(backend, &[]).await;
    let mine = post(&server, "/api/v1/teams", &admin(), json!({"name": "mine"})).await.body["id"].as_i64().unwrap();
    let theirs = post(&server, "/api/v1/teams", &admin(), json!({"name": "theirs"})).await.body["id"].as_i64().unwrap();
    let mia = add_user(&server, "mia@a.example", "mia-password-1", "member").await;
    let r = send(&server, "PUT", &format!("/api/v1/teams/{mine}/members/{mia}"), &admin(), None).await;
    assert_eq!(r.status, 204, "{}", r.text);
    let s = Auth::Session(login(&server, "mia@a.example", "mia-password-1").await);

    let r = post(&server, "/api/v1/api-keys", &s, json!({"name": "x", "scopes": ["ingest"], "team_id": theirs})).await;
    assert_eq!((r.status, r.body["error"]["code"].as_str()), (403, Some("forbidden")), "{}", r.text);
    let r = post(&server, "/api/v1/api-keys", &s, json!({"name": "y", "scopes": ["ingest"], "team_id": mine})).await;
    assert_eq!((r.status, r.body["team_id"].as_i64()), (201, Some(mine)), "{}", r.text);
    let keys = get(&server, "/api/v1/api-keys", &s).await.body;
    assert_eq!(keys.as_array().unwrap().len(), 1, "the refused key was not made: {keys}");
    // Admins attach keys to any team of the organisation.
    let r = post(&server, "/api/v1/api-keys", &admin(), json!({"name": "z", "scopes": ["ingest"], "team_id": theirs}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

async fn user_creation_does_not_tell_other_organisations_emails(backend: Backend) {
    let (_db, server) = start(backend, &["--login-attempts", "3"]).await;
    let r = post(
        &server,
        "/api/v1/orgs",
        &admin(),
        json!({"name": "org-b", "admin_email": "bob@b.example", "admin_password": "b-password-123"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let bob = Auth::Session(login(&server, "bob@b.example", "b-password-123").await);
    let taken_elsewhere = post(
        &server,
        "/api/v1/users",
        &bob,
        json!({"email": ADMIN_EMAIL, "password": "password-123", "role": "viewer"}),
    )
    .await;
    assert_eq!(taken_elsewhere.status, 409, "{}", taken_elsewhere.text);
    let message = taken_elsewhere.body["error"]["message"].as_str().unwrap().to_lowercase();
    for word in ["exist", "admin@a.example", "organisation", "another"] {
        assert!(!message.contains(word), "the answer tells {word:?}: {message}");
    }
    // Probing is slowed down: after --login-attempts refusals, 429.
    let mut statuses = Vec::new();
    for i in 0..3 {
        let email = if i == 0 { "admin@a.example".to_string() } else { format!("probe{i}@b.example") };
        let body = json!({"email": email, "password": "password-123", "role": "viewer"});
        if i > 0 {
            // A free address is created, as usual.
            assert_eq!(post(&server, "/api/v1/users", &bob, body.clone()).await.status, 201);
        }
        statuses.push(post(&server, "/api/v1/users", &bob, body).await.status);
    }
    assert_eq!(statuses, vec![409, 409, 429], "the fourth refusal in the window is rate-limited");
    // Nothing of org A was changed or shown.
    let users = get(&server, "/api/v1/users", &bob).await.body;
    let emails: Vec<&str> = users.as_array().unwrap().iter().map(|u| u["email"].as_str().unwrap()).collect();
    assert_eq!(emails, vec!["bob@b.example", "probe1@b.example", "probe2@b.example"]);
}
