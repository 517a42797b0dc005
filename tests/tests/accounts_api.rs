//! Black box: accounts, sessions, CSRF, roles, API keys, team assignment and tenant isolation,
//! on the real server binary, on SQLite and PostgreSQL.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fleetlens_tests::accounts::{
    ADMIN_EMAIL, ADMIN_PASSWORD, Auth, Resp, Session, admin, get, login, post, put, send, start, try_login,
};
use fleetlens_tests::http::now_ms;
use fleetlens_tests::{Backend, TestDatabase, TestServer, hollow_samples};
use serde_json::{Value, json};
use sqlx::Connection;

fleetlens_tests::for_each_backend!(
    login_sets_a_session_cookie_and_logout_ends_it,
    session_writes_need_the_csrf_token,
    login_is_rate_limited,
    roles_decide_what_a_session_may_do,
    api_keys_are_shown_once_hashed_and_revocable,
    ingest_assigns_teams_by_label_key_and_admin,
    organisations_never_see_each_other,
);

const SESSION_COOKIE: &str = "__Host-fleetlens_session";

async fn ingest(server: &TestServer, auth: &Auth, host: &str, labels: Value, samples: Vec<Value>) -> Resp {
    post(server, "/api/v1/ingest", auth, json!({"host": host, "labels": labels, "samples": samples})).await
}

/// Rows of one text column, read straight from the database.
async fn db_texts(db_url: &str, sql: &str) -> Vec<String> {
    if db_url.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db_url).await.expect("open sqlite");
        sqlx::query_scalar(sql).fetch_all(&mut c).await.expect("query")
    } else {
        let mut c = sqlx::PgConnection::connect(db_url).await.expect("open postgres");
        sqlx::query_scalar(sql).fetch_all(&mut c).await.expect("query")
    }
}

/// Whether `secret` appears anywhere in the SQLite files (database and WAL).
fn sqlite_files_contain(db: &TestDatabase, secret: &str) -> bool {
    let Some(path) = db.sqlite_path() else { return false };
    let wal = path.with_extension("db-wal");
    [path, wal]
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .any(|bytes| bytes.windows(secret.len()).any(|w| w == secret.as_bytes()))
}

async fn login_sets_a_session_cookie_and_logout_ends_it(backend: Backend) {
    let (db, mut server) = start(backend, &[]).await;
    let wrong = try_login(&server, ADMIN_EMAIL, "not-the-password").await;
    assert_eq!(
        (wrong.status, wrong.body["error"]["code"].as_str()),
        (401, Some("invalid_credentials")),
        "{}",
        wrong.text
    );
    let unknown = try_login(&server, "nobody@a.example", "not-the-password").await;
    assert_eq!(unknown.status, 401);
    assert_eq!(unknown.body, wrong.body, "unknown emails and wrong passwords answer alike");
    assert!(wrong.headers.get("set-cookie").is_none());

    let r = try_login(&server, "  Admin@A.example ", ADMIN_PASSWORD).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let set_cookie = r.headers.get("set-cookie").unwrap().to_str().unwrap().to_string();
    let attrs: Vec<&str> = set_cookie.split(';').map(str::trim).collect();
    assert!(attrs[0].starts_with(&format!("{SESSION_COOKIE}=")), "{set_cookie}");
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/", "Secure"] {
        assert!(attrs.contains(&attr), "{attr} missing: {set_cookie}");
    }
    let token = attrs[0].split_once('=').unwrap().1.to_string();
    assert_eq!(token.len(), 64, "256 random bits, hex");
    assert_eq!(r.body["user"]["email"], ADMIN_EMAIL);
    assert_eq!(r.body["user"]["role"], "admin");
    assert_eq!(r.body["org"]["id"], 1);
    assert!(r.body["user"].get("password_hash").is_none());
    let session = Session { cookie: attrs[0].to_string(), csrf: r.body["csrf_token"].as_str().unwrap().to_string() };

    // At rest: the password as argon2id, the session token only as its hash.
    let hashes = db_texts(&db.url, "SELECT password_hash FROM users").await;
    assert!(hashes.len() == 1 && hashes[0].starts_with("$argon2id$"), "{hashes:?}");
    let tokens = db_texts(&db.url, "SELECT token_hash FROM sessions").await;
    assert_eq!(tokens.len(), 1);
    assert_ne!(tokens[0], token);
    assert!(!sqlite_files_contain(&db, &token) && !sqlite_files_contain(&db, ADMIN_PASSWORD));

    let me = get(&server, "/api/v1/auth/me", &Auth::Session(session.clone())).await;
    assert_eq!(me.status, 200, "{}", me.text);
    assert_eq!((me.body["via"].as_str(), me.body["role"].as_str()), (Some("session"), Some("admin")));
    assert_eq!(me.body["csrf_token"].as_str(), Some(session.csrf.as_str()));
    assert_eq!(get(&server, "/api/v1/gpus", &Auth::Session(session.clone())).await.status, 200);
    assert_eq!(get(&server, "/api/v1/gpus", &Auth::None).await.status, 401);

    // Logout needs the CSRF token too; then the cookie is cleared and the session gone.
    let no_csrf = reqwest::Client::new()
        .post(server.url("/api/v1/auth/logout"))
        .header("cookie", &session.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(no_csrf.status().as_u16(), 403);
    let out = post(&server, "/api/v1/auth/logout", &Auth::Session(session.clone()), json!({})).await;
    assert_eq!(out.status, 204, "{}", out.text);
    let cleared = out.headers.get("set-cookie").unwrap().to_str().unwrap();
    assert!(cleared.starts_with(&format!("{SESSION_COOKIE}=;")) && cleared.contains("Max-Age=0"), "{cleared}");
    let after = get(&server, "/api/v1/auth/me", &Auth::Session(session.clone())).await;
    assert_eq!((after.status, after.body["error"]["code"].as_str()), (401, Some("unauthenticated")));
    assert!(db_texts(&db.url, "SELECT token_hash FROM sessions").await.is_empty());

    // A restart with another bootstrap password and --reset-admin-password resets the admin's
    // password (without the flag it is left alone: accounts_security.rs).
    server.kill();
    let server = TestServer::spawn(
        &db.url,
        &[
            "--admin-email",
            ADMIN_EMAIL,
            "--admin-password",
            "another-password-2",
            "--reset-admin-password",
            "true",
            "--cookie-secure",
            "false",
        ],
    );
    assert_eq!(try_login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await.status, 401);
    let r = try_login(&server, ADMIN_EMAIL, "another-password-2").await;
    assert_eq!(r.status, 200);
    let plain = r.headers.get("set-cookie").unwrap().to_str().unwrap();
    assert!(plain.starts_with("fleetlens_session=") && !plain.contains("Secure"), "{plain}");
    assert_eq!(db_texts(&db.url, "SELECT email FROM users").await, vec![ADMIN_EMAIL.to_string()]);
}

async fn session_writes_need_the_csrf_token(backend: Backend) {
    let (_db, server) = start(backend, &[]).await;
    let s = login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    let client = reqwest::Client::new();
    let attempt = |csrf: Option<&str>, fetch_site: Option<&str>, name: &str| {
        let mut req = client.post(server.url("/api/v1/teams")).header("cookie", &s.cookie).json(&json!({"name": name}));
        if let Some(c) = csrf {
            req = req.header("x-csrf-token", c);
        }
        if let Some(f) = fetch_site {
            req = req.header("sec-fetch-site", f);
        }
        req.send()
    };
    for (csrf, site) in [(None, None), (Some("0".repeat(64)), None), (Some(s.csrf.clone()), Some("cross-site"))] {
        let r = attempt(csrf.as_deref(), site, "nope").await.unwrap();
        assert_eq!(r.status().as_u16(), 403);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "csrf_failed", "{body}");
    }
    let ok = attempt(Some(&s.csrf), Some("same-origin"), "platform").await.unwrap();
    assert_eq!(ok.status().as_u16(), 201);
    // PUT and DELETE too.
    let id = ok.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    let del =
        client.delete(server.url(&format!("/api/v1/teams/{id}"))).header("cookie", &s.cookie).send().await.unwrap();
    assert_eq!(del.status().as_u16(), 403);
    let teams = get(&server, "/api/v1/teams", &Auth::Session(s.clone())).await;
    assert_eq!(teams.body.as_array().unwrap().len(), 1, "nothing was created or deleted without the token");
    // Reads need no token; API keys need none (a browser never sends Authorization by itself).
    let read = client.get(server.url("/api/v1/teams")).header("cookie", &s.cookie).send().await.unwrap();
    assert_eq!(read.status().as_u16(), 200);
    assert_eq!(post(&server, "/api/v1/teams", &admin(), json!({"name": "by-key"})).await.status, 201);

    // Login: no cross-site requests, JSON bodies only (a form cannot send it without CORS).
    let cross = client
        .post(server.url("/api/v1/auth/login"))
        .header("sec-fetch-site", "cross-site")
        .json(&json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status().as_u16(), 403);
    let form = client
        .post(server.url("/api/v1/auth/login"))
        .header("content-type", "text/plain")
        .body(json!({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(form.status().as_u16(), 415);
}

async fn login_is_rate_limited(backend: Backend) {
    let (_db, server) = start(backend, &["--login-attempts", "5"]).await;
    for i in 0..5 {
        assert_eq!(try_login(&server, ADMIN_EMAIL, "wrong-password").await.status, 401, "attempt {i}");
    }
    let limited = try_login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await;
    assert_eq!(limited.status, 429, "even the right password waits: {}", limited.text);
    assert_eq!(limited.body["error"]["code"], "rate_limited");
    let retry: u64 = limited.headers.get("retry-after").unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=15 * 60).contains(&retry), "{retry}");
    assert_eq!(try_login(&server, "ADMIN@a.example", ADMIN_PASSWORD).await.status, 429, "emails are normalized");
    // Another account from the same address is not locked out by this one.
    assert_eq!(try_login(&server, "other@a.example", "wrong-password").await.status, 401);
}

async fn roles_decide_what_a_session_may_do(backend: Backend) {
    let (_db, server) = start(backend, &[]).await;
    let root = Auth::Session(login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await);
    for (email, role) in [("mia@a.example", "member"), ("vic@a.example", "viewer")] {
        let r =
            post(&server, "/api/v1/users", &root, json!({"email": email, "password": "password-123", "role": role}))
                .await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.body["role"], role);
    }
    let dup = post(
        &server,
        "/api/v1/users",
        &root,
        json!({"email": "MIA@a.example", "password": "password-123", "role": "viewer"}),
    )
    .await;
    assert_eq!(dup.status, 409);
    let weak =
        post(&server, "/api/v1/users", &root, json!({"email": "w@a.example", "password": "short", "role": "viewer"}))
            .await;
    assert_eq!((weak.status, weak.body["error"]["field"].as_str()), (422, Some("password")));
    // A role that is none does not parse (400, as every typed body's bad name): the answer
    // names the field and the roles there are, on create and on change; nothing is stored.
    let boss = post(
        &server,
        "/api/v1/users",
        &root,
        json!({"email": "b@a.example", "password": "password-123", "role": "boss"}),
    )
    .await;
    assert_eq!((boss.status, boss.body["error"]["field"].as_str()), (400, Some("role")), "{}", boss.text);
    assert!(boss.text.contains("`viewer`, `member`, `admin`"), "{}", boss.text);
    let users = get(&server, "/api/v1/users", &root).await.body;
    let id_of =
        |email: &str| users.as_array().unwrap().iter().find(|u| u["email"] == email).unwrap()["id"].as_i64().unwrap();
    let (mia_id, vic_id, root_id) = (id_of("mia@a.example"), id_of("vic@a.example"), id_of(ADMIN_EMAIL));

    let bad = put(&server, &format!("/api/v1/users/{vic_id}"), &root, json!({"role": "boss"})).await;
    assert_eq!((bad.status, bad.body["error"]["field"].as_str()), (400, Some("role")), "{}", bad.text);
    let vic = get(&server, "/api/v1/users", &root).await.body;
    assert_eq!(vic.as_array().unwrap().iter().find(|u| u["id"] == vic_id).unwrap()["role"], "viewer");
    assert_eq!(users.as_array().unwrap().len(), 3, "no user b@a.example: {users}");

    let viewer = Auth::Session(login(&server, "vic@a.example", "password-123").await);
    let member = Auth::Session(login(&server, "mia@a.example", "password-123").await);
    assert_eq!(ingest(&server, &admin(), "n1", json!({}), hollow_samples("GPU-r-1", 5, 1000)).await.status, 200);

    // Viewers read, and change nothing.
    assert_eq!(get(&server, "/api/v1/gpus", &viewer).await.status, 200);
    assert_eq!(get(&server, "/api/v1/teams", &viewer).await.status, 200);
    let denied = post(&server, "/api/v1/api-keys", &viewer, json!({"name": "v", "scopes": ["read"]})).await;
    assert_eq!((denied.status, denied.body["error"]["code"].as_str()), (403, Some("forbidden")), "{}", denied.text);
    assert_eq!(post(&server, "/api/v1/teams", &viewer, json!({"name": "t"})).await.status, 403);
    assert_eq!(
        put(&server, "/api/v1/prices", &viewer, json!({"currency": "USD", "source": "s", "per_gpu_hour": {}}))
            .await
            .status,
        403
    );
    assert_eq!(ingest(&server, &viewer, "n1", json!({}), hollow_samples("GPU-r-1", 2, 1000)).await.status, 403);
    assert_eq!(get(&server, "/api/v1/users", &viewer).await.status, 403);
    assert_eq!(get(&server, &format!("/api/v1/users/{vic_id}"), &viewer).await.status, 200, "themself");
    assert_eq!(get(&server, &format!("/api/v1/users/{mia_id}"), &viewer).await.status, 403);
    assert_eq!(get(&server, "/api/v1/api-keys", &viewer).await.body, json!([]));

    // Members send data and make keys within their role; not admin keys, not users.
    let k = post(&server, "/api/v1/api-keys", &member, json!({"name": "mia agent", "scopes": ["ingest"]})).await;
    assert_eq!(k.status, 201, "{}", k.text);
    assert_eq!(k.body["user_id"], mia_id);
    let mia_key = Auth::Key(k.body["key"].as_str().unwrap().to_string());
    assert_eq!(post(&server, "/api/v1/api-keys", &member, json!({"name": "x", "scopes": ["admin"]})).await.status, 403);
    assert_eq!(
        post(
            &server,
            "/api/v1/users",
            &member,
            json!({"email": "z@a.example", "password": "password-123", "role": "admin"})
        )
        .await
        .status,
        403
    );
    assert_eq!(ingest(&server, &mia_key, "n2", json!({}), hollow_samples("GPU-r-2", 3, 1000)).await.status, 200);
    assert_eq!(ingest(&server, &member, "n2", json!({}), hollow_samples("GPU-r-2", 2, 1000)).await.status, 200);
    let own = get(&server, "/api/v1/api-keys", &member).await.body;
    assert_eq!(own.as_array().unwrap().len(), 1, "only their own keys: {own}");
    let all = get(&server, "/api/v1/api-keys", &root).await.body;
    assert!(all.as_array().unwrap().len() >= 2, "admins see every key: {all}");

    // A key never grants more than its owner's current role; disabling ends sessions and keys.
    let demote = put(&server, &format!("/api/v1/users/{mia_id}"), &root, json!({"role": "viewer"})).await;
    assert_eq!(demote.status, 200, "{}", demote.text);
    assert_eq!(ingest(&server, &mia_key, "n2", json!({}), hollow_samples("GPU-r-2", 2, 1000)).await.status, 403);
    assert_eq!(get(&server, "/api/v1/auth/me", &member).await.body["role"], "viewer");
    assert_eq!(put(&server, &format!("/api/v1/users/{mia_id}"), &root, json!({"disabled": true})).await.status, 200);
    assert_eq!(get(&server, "/api/v1/auth/me", &member).await.status, 401);
    assert_eq!(get(&server, "/api/v1/gpus", &mia_key).await.status, 401);
    assert_eq!(try_login(&server, "mia@a.example", "password-123").await.status, 401);

    // The organisation keeps an admin; nobody deletes themself.
    let last = put(&server, &format!("/api/v1/users/{root_id}"), &root, json!({"role": "member"})).await;
    assert_eq!(last.status, 409, "{}", last.text);
    assert_eq!(send(&server, "DELETE", &format!("/api/v1/users/{root_id}"), &root, None).await.status, 409);
    assert_eq!(send(&server, "DELETE", &format!("/api/v1/users/{vic_id}"), &root, None).await.status, 204);
    assert_eq!(get(&server, "/api/v1/auth/me", &viewer).await.status, 401);

    // Changing one's own password ends one's other sessions.
    let root2 = Auth::Session(login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await);
    let bad = put(
        &server,
        "/api/v1/auth/password",
        &root,
        json!({"current_password": "nope-nope", "new_password": "password-999"}),
    )
    .await;
    assert_eq!(bad.status, 422);
    let changed = put(
        &server,
        "/api/v1/auth/password",
        &root,
        json!({"current_password": ADMIN_PASSWORD, "new_password": "password-999"}),
    )
    .await;
    assert_eq!(changed.status, 204, "{}", changed.text);
    assert_eq!(get(&server, "/api/v1/auth/me", &root).await.status, 200);
    assert_eq!(get(&server, "/api/v1/auth/me", &root2).await.status, 401);
    assert_eq!(try_login(&server, ADMIN_EMAIL, "password-999").await.status, 200);
}

async fn api_keys_are_shown_once_hashed_and_revocable(backend: Backend) {
    let (db, server) = start(backend, &[]).await;
    let created =
        post(&server, "/api/v1/api-keys", &admin(), json!({"name": "rack 7 agent", "scopes": ["ingest", "read"]}))
            .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let secret = created.body["key"].as_str().unwrap().to_string();
    let id = created.body["id"].as_i64().unwrap();
    assert!(secret.starts_with("flk_") && secret.len() == 68, "{secret}");
    assert_eq!(created.body["prefix"].as_str().unwrap(), &secret[..12]);
    assert_eq!(created.body["scopes"], json!(["ingest", "read"]));
    assert_eq!(created.body["last_used_ms"], Value::Null);

    // Never shown again, and only its hash at rest.
    let listed = get(&server, "/api/v1/api-keys", &admin()).await;
    assert!(!listed.text.contains(&secret));
    assert!(listed.body.as_array().unwrap().iter().all(|k| k.get("key").is_none()));
    let one = get(&server, &format!("/api/v1/api-keys/{id}"), &admin()).await;
    assert_eq!(one.status, 200);
    assert!(!one.text.contains(&secret));
    let stored =
        db_texts(&db.url, "SELECT key_hash || ' ' || prefix || ' ' || name || ' ' || scopes FROM api_keys").await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored.iter().all(|row| !row.contains(&secret) && !row.contains(&secret[12..])), "{stored:?}");
    let hash = db_texts(&db.url, &format!("SELECT key_hash FROM api_keys WHERE id = {id}")).await.remove(0);
    assert!(hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()), "{hash}");
    assert!(!sqlite_files_contain(&db, &secret));

    // Use records the time (written in the background).
    let key = Auth::Key(secret.clone());
    let before = now_ms();
    assert_eq!(get(&server, "/api/v1/gpus", &key).await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let used = loop {
        let v = get(&server, &format!("/api/v1/api-keys/{id}"), &admin()).await.body;
        if let Some(t) = v["last_used_ms"].as_i64() {
            break t;
        }
        assert!(Instant::now() < deadline, "last_used_ms never set: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(used >= before - 1000 && used <= now_ms(), "{used} vs {before}");
    let me = get(&server, "/api/v1/auth/me", &key).await.body;
    assert_eq!((me["via"].as_str(), me["api_key"]["id"].as_i64()), (Some("api_key"), Some(id)));
    assert_eq!(me["scopes"], json!(["read", "ingest"]));

    // Scopes: a read+ingest key cannot make keys or change settings.
    assert_eq!(post(&server, "/api/v1/api-keys", &key, json!({"name": "x", "scopes": ["read"]})).await.status, 403);
    assert_eq!(post(&server, "/api/v1/api-keys", &admin(), json!({"name": "x", "scopes": []})).await.status, 422);
    assert_eq!(post(&server, "/api/v1/api-keys", &admin(), json!({"name": "x", "scopes": ["root"]})).await.status, 422);

    // Revoked: 401 at once, listed as revoked, revoking again keeps the time.
    let revoked = send(&server, "DELETE", &format!("/api/v1/api-keys/{id}"), &admin(), None).await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    assert_eq!(revoked.body["revoked"], true);
    let at = revoked.body["revoked_ms"].as_i64().unwrap();
    let denied = get(&server, "/api/v1/gpus", &key).await;
    assert_eq!((denied.status, denied.body["error"]["code"].as_str()), (401, Some("unauthenticated")));
    let ingest_denied = ingest(&server, &key, "h", json!({}), hollow_samples("GPU-k-1", 2, 1000)).await;
    assert_eq!(ingest_denied.status, 401);
    let again = send(&server, "DELETE", &format!("/api/v1/api-keys/{id}"), &admin(), None).await;
    assert_eq!(again.body["revoked_ms"].as_i64(), Some(at));
    assert_eq!(send(&server, "DELETE", "/api/v1/api-keys/999999", &admin(), None).await.status, 404);
}

async fn ingest_assigns_teams_by_label_key_and_admin(backend: Backend) {
    let (_db, server) = start(backend, &[]).await;
    let gpu_team = |hosts: &Value, uuid: &str| -> (Value, Value) {
        let g = hosts
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|h| h["gpus"].as_array().unwrap().iter())
            .find(|g| g["uuid"] == uuid)
            .unwrap_or_else(|| panic!("{uuid} in {hosts}"))
            .clone();
        (g["team_name"].clone(), g["team_source"].clone())
    };

    // By the label the agent sends: the team is created on first sight.
    let r =
        ingest(&server, &admin(), "node-1", json!({"team": "vision", "rack": "7"}), hollow_samples("GPU-t-1", 3, 1000))
            .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let hosts = get(&server, "/api/v1/hosts", &admin()).await.body;
    assert_eq!(gpu_team(&hosts, "GPU-t-1"), (json!("vision"), json!("label")));
    let teams = get(&server, "/api/v1/teams", &admin()).await.body;
    assert_eq!(teams.as_array().unwrap().iter().map(|t| t["name"].clone()).collect::<Vec<_>>(), vec![json!("vision")]);

    // By the key: a key made for a team puts its hosts in it, whatever the label says.
    let infra = post(&server, "/api/v1/teams", &admin(), json!({"name": "infra"})).await.body["id"].as_i64().unwrap();
    let k = post(
        &server,
        "/api/v1/api-keys",
        &admin(),
        json!({"name": "infra agents", "scopes": ["ingest"], "team_id": infra}),
    )
    .await;
    assert_eq!((k.status, k.body["team_id"].as_i64()), (201, Some(infra)), "{}", k.text);
    let infra_key = Auth::Key(k.body["key"].as_str().unwrap().to_string());
    assert_eq!(
        ingest(&server, &infra_key, "node-2", json!({"team": "vision"}), hollow_samples("GPU-t-2", 3, 1000))
            .await
            .status,
        200
    );
    let hosts = get(&server, "/api/v1/hosts", &admin()).await.body;
    assert_eq!(gpu_team(&hosts, "GPU-t-2"), (json!("infra"), json!("key")));
    assert_eq!(gpu_team(&hosts, "GPU-t-1"), (json!("vision"), json!("label")));

    // By an admin: a host (its GPUs now and later), then one GPU.
    let ops = post(&server, "/api/v1/teams", &admin(), json!({"name": "ops"})).await.body["id"].as_i64().unwrap();
    let h = put(&server, "/api/v1/hosts/node-1/team", &admin(), json!({"team_id": ops})).await;
    assert_eq!((h.status, h.body["assigned_team_id"].as_i64()), (200, Some(ops)), "{}", h.text);
    assert_eq!(
        ingest(&server, &admin(), "node-1", json!({"team": "vision"}), hollow_samples("GPU-t-3", 3, 1000)).await.status,
        200
    );
    let hosts = get(&server, "/api/v1/hosts", &admin()).await.body;
    assert_eq!(gpu_team(&hosts, "GPU-t-1"), (json!("ops"), json!("host")));
    assert_eq!(gpu_team(&hosts, "GPU-t-3"), (json!("ops"), json!("host")), "a GPU the host reports later");
    let g = put(&server, "/api/v1/gpus/GPU-t-3/team", &admin(), json!({"team_id": infra})).await;
    assert_eq!(
        (g.status, g.body["team_name"].as_str(), g.body["team_source"].as_str()),
        (200, Some("infra"), Some("gpu"))
    );
    assert_eq!(
        ingest(&server, &admin(), "node-1", json!({"team": "vision"}), hollow_samples("GPU-t-3", 2, 1000)).await.status,
        200
    );
    let hosts = get(&server, "/api/v1/hosts", &admin()).await.body;
    assert_eq!(gpu_team(&hosts, "GPU-t-3"), (json!("infra"), json!("gpu")));

    // Clearing returns the GPU to its host's team, and the host to what ingest says.
    assert_eq!(put(&server, "/api/v1/gpus/GPU-t-3/team", &admin(), json!({"team_id": null})).await.status, 200);
    assert_eq!(put(&server, "/api/v1/hosts/node-1/team", &admin(), json!({"team_id": null})).await.status, 200);
    assert_eq!(
        ingest(&server, &admin(), "node-1", json!({"team": "vision"}), hollow_samples("GPU-t-1", 2, 1000)).await.status,
        200
    );
    let hosts = get(&server, "/api/v1/hosts", &admin()).await.body;
    assert_eq!(gpu_team(&hosts, "GPU-t-1"), (json!("vision"), json!("label")));
    assert_eq!(gpu_team(&hosts, "GPU-t-3"), (json!("vision"), json!("label")));

    // Unknown targets and teams; deleting a team leaves its GPUs without one.
    assert_eq!(put(&server, "/api/v1/hosts/node-9/team", &admin(), json!({"team_id": ops})).await.status, 404);
    assert_eq!(put(&server, "/api/v1/gpus/GPU-t-1/team", &admin(), json!({"team_id": 999999})).await.status, 404);
    assert_eq!(put(&server, "/api/v1/gpus/GPU-t-1/team", &admin(), json!({"team": 1})).await.status, 400);
    let viewer = post(&server, "/api/v1/api-keys", &admin(), json!({"name": "ro", "scopes": ["read"]})).await;
    let ro = Auth::Key(viewer.body["key"].as_str().unwrap().to_string());
    assert_eq!(put(&server, "/api/v1/hosts/node-1/team", &ro, json!({"team_id": ops})).await.status, 403);
    assert_eq!(send(&server, "DELETE", &format!("/api/v1/teams/{infra}"), &admin(), None).await.status, 204);
    let hosts = get(&server, "/api/v1/hosts", &admin()).await.body;
    assert_eq!(gpu_team(&hosts, "GPU-t-2"), (Value::Null, Value::Null));
}

// ---------------------------------------------------------------------------------------------
// Tenant isolation
// ---------------------------------------------------------------------------------------------

/// Every (method, path) the server routes, from its OpenAPI document (which is generated from
/// the router: see openapi_api.rs): the sweep must cover each. API routes are relative to
/// /api/v1, as the router writes them.
async fn server_routes(server: &TestServer) -> BTreeSet<(String, String)> {
    let doc: Value = reqwest::get(server.url("/api/openapi.json")).await.unwrap().json().await.unwrap();
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("OpenAPI paths") {
        let route = path.strip_prefix("/api/v1").unwrap_or(path);
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                routes.insert((method.to_uppercase(), route.to_string()));
            }
        }
    }
    assert!(routes.len() > 50, "too few routes in the OpenAPI document: {routes:?}");
    routes
}

/// One request of the sweep.
struct Probe {
    method: &'static str,
    /// The route as written in the router (relative to /api/v1 for API routes).
    route: &'static str,
    url: String,
    body: Option<Value>,
    /// Aimed at organisation A's ids (in the path or the body): must be 403 or 404 (422 for a
    /// refused body). Otherwise any answer below 500. Never anything of A.
    targets_a: bool,
}

fn probe(method: &'static str, route: &'static str, url: String, body: Option<Value>, targets_a: bool) -> Probe {
    Probe { method, route, url, body, targets_a }
}

async fn poll_first_id(server: &TestServer, path: &str, auth: &Auth, field: &str) -> Option<i64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let v = get(server, path, auth).await.body;
        let first = v.get(field).unwrap_or(&v).as_array().and_then(|a| a.first().cloned());
        if let Some(id) = first.and_then(|x| x["id"].as_i64()) {
            return Some(id);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// `v` without the `…_ms` fields (last use, next send, …: times that move on their own).
fn without_times(v: Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.into_iter().filter(|(k, _)| !k.ends_with("_ms")).map(|(k, v)| (k, without_times(v))).collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_times).collect()),
        other => other,
    }
}

/// Organisation A's data, read with A's admin key, to compare before and after the sweep.
async fn a_snapshot(server: &TestServer, a_uuid: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for path in [
        format!("/api/v1/gpus/{a_uuid}"),
        "/api/v1/teams".to_string(),
        "/api/v1/users".to_string(),
        "/api/v1/api-keys".to_string(),
        "/api/v1/hosts".to_string(),
        "/api/v1/prices".to_string(),
        "/api/v1/settings/thresholds".to_string(),
        "/api/v1/alert-rules".to_string(),
        "/api/v1/notification-channels".to_string(),
        "/api/v1/silences".to_string(),
        "/api/v1/jobs?from=0&to=4102444800000".to_string(),
        "/api/v1/events".to_string(),
        "/api/v1/reclaim-policies".to_string(),
        "/api/v1/report-routes".to_string(),
    ] {
        let v = get(server, &path, &admin()).await.body;
        let v = if path.starts_with("/api/v1/gpus/") {
            // The GPU itself; its current state moves with the clock.
            json!({"uuid": v["uuid"], "host": v["host"], "latest": v["latest"]})
        } else {
            without_times(v)
        };
        out.push((path, v));
    }
    out
}

async fn organisations_never_see_each_other(backend: Backend) {
    let (_db, server) = start(backend, &["--alert-eval-interval", "200ms"]).await;
    let a = admin();
    let a_uuid = "GPU-a-0001";
    let a_host = "a-host-17";

    // Organisation A (the default one): data of every kind.
    let r = ingest(&server, &a, a_host, json!({"team": "a-team-label"}), hollow_samples(a_uuid, 30, 1000)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let xid = json!({"host": a_host, "samples": [], "events": [{"ts_ms": now_ms() - 1000, "uuid": a_uuid, "kind": "xid", "xid": 48, "message": "a-xid-omega"}]});
    assert_eq!(post(&server, "/api/v1/ingest", &a, xid).await.status, 200);
    let a_team = post(&server, "/api/v1/teams", &a, json!({"name": "a-team-zeta"})).await.body["id"].as_i64().unwrap();
    let a_user = post(
        &server,
        "/api/v1/users",
        &a,
        json!({"email": "alice@a.example", "password": "password-123", "role": "viewer"}),
    )
    .await;
    let a_user = a_user.body["id"].as_i64().unwrap();
    assert_eq!(send(&server, "PUT", &format!("/api/v1/teams/{a_team}/members/{a_user}"), &a, None).await.status, 204);
    let a_key =
        post(&server, "/api/v1/api-keys", &a, json!({"name": "a-key-ingest", "scopes": ["ingest"], "team_id": a_team}))
            .await;
    let (a_key_id, a_key_secret) =
        (a_key.body["id"].as_i64().unwrap(), a_key.body["key"].as_str().unwrap().to_string());
    let a_key_prefix = a_key.body["prefix"].as_str().unwrap().to_string();
    assert_eq!(put(&server, &format!("/api/v1/hosts/{a_host}/team"), &a, json!({"team_id": a_team})).await.status, 200);
    let prices =
        json!({"currency": "USD", "source": "a-price-source", "per_gpu_hour": {"NVIDIA H100 80GB HBM3": 7.654321}});
    assert_eq!(put(&server, "/api/v1/prices", &a, prices).await.status, 200);
    assert_eq!(
        put(&server, "/api/v1/settings/thresholds", &a, json!({"idle_held_min_mem_bytes": 123456789})).await.status,
        200
    );
    let now = now_ms();
    let job = json!({"name": "a-job-kappa", "gpus": [a_uuid], "from": now - 60_000, "to": now, "precision": "bf16", "achieved_flops_per_s": 1.0e14});
    assert_eq!(post(&server, "/api/v1/jobs", &a, job).await.status, 201);
    let ch = post(
        &server,
        "/api/v1/notification-channels",
        &a,
        json!({"name": "a-chan", "kind": "webhook", "url": "http://127.0.0.1:9/a-hook-secret"}),
    )
    .await;
    assert!(ch.status < 300, "{}", ch.text);
    let a_channel = ch.body["id"].as_i64().unwrap();
    let rule = post(
        &server,
        "/api/v1/alert-rules",
        &a,
        json!({"name": "a-rule-zebra", "condition": "gpu_util_pct >= 0", "for_s": 0, "channels": [a_channel]}),
    )
    .await;
    assert!(rule.status < 300, "{}", rule.text);
    let a_rule = rule.body["id"].as_i64().unwrap();
    let silence = post(
        &server,
        "/api/v1/silences",
        &a,
        json!({"matchers": {"host": "nowhere"}, "ends_at": now + 3_600_000, "comment": "a-silence-comment"}),
    )
    .await;
    assert!(silence.status < 300, "{}", silence.text);
    let a_silence = silence.body["id"].as_i64().unwrap();
    // A's idle-reclaim policy and report route (docs/ACTIONS.md).
    let policy = post(
        &server,
        "/api/v1/reclaim-policies",
        &a,
        json!({"name": "a-policy-omega", "state": "idle_held", "for_s": 3600, "grace_s": 600, "action": "webhook", "action_channel_id": a_channel}),
    )
    .await;
    assert!(policy.status < 300, "{}", policy.text);
    let a_policy = policy.body["id"].as_i64().unwrap();
    let route =
        post(&server, "/api/v1/report-routes", &a, json!({"channel_id": a_channel, "owner": "a-owner-sigma"})).await;
    assert!(route.status < 300, "{}", route.text);
    let a_route = route.body["id"].as_i64().unwrap();
    // An alert instance of A (its rule matches every sample).
    let a_alert = poll_first_id(&server, "/api/v1/alerts?status=all", &a, "alerts").await.expect("an alert of A");

    // Organisation B: its admin logs in and makes a key.
    let b = post(
        &server,
        "/api/v1/orgs",
        &a,
        json!({"name": "org-b", "admin_email": "bob@b.example", "admin_password": "b-password-123"}),
    )
    .await;
    assert_eq!(b.status, 201, "{}", b.text);
    assert_ne!(b.body["org"]["id"], 1);
    let b_session = login(&server, "bob@b.example", "b-password-123").await;
    let bs = Auth::Session(b_session.clone());
    let bk = post(&server, "/api/v1/api-keys", &bs, json!({"name": "b-admin", "scopes": ["admin"]})).await;
    assert_eq!(bk.status, 201, "{}", bk.text);
    let b_key = Auth::Key(bk.body["key"].as_str().unwrap().to_string());
    assert_eq!(ingest(&server, &b_key, "b-host", json!({}), hollow_samples("GPU-b-0001", 5, 1000)).await.status, 200);
    let b_team = post(&server, "/api/v1/teams", &b_key, json!({"name": "b-team"})).await.body["id"].as_i64().unwrap();
    let b_user = get(&server, "/api/v1/auth/me", &bs).await.body["user"]["id"].as_i64().unwrap();

    let before = a_snapshot(&server, a_uuid).await;
    let markers = [
        a_uuid,
        a_host,
        "a-team-zeta",
        "a-team-label",
        "alice@a.example",
        ADMIN_EMAIL,
        "a-key-ingest",
        &a_key_prefix,
        "a-rule-zebra",
        "a-hook-secret",
        "a-policy-omega",
        "a-owner-sigma",
        "a-silence-comment",
        "a-job-kappa",
        "a-xid-omega",
        "7.654321",
        "a-price-source",
        "123456789",
        "FLEETLENS_ADMIN_TOKEN",
        "fl_test",
    ];

    let b_samples = json!({"host": "b-host", "samples": hollow_samples("GPU-b-0001", 2, 1000)});
    let rule_body = json!({"name": "b-rule", "condition": "gpu_util_pct >= 99", "for_s": 60});
    let channel_body = json!({"name": "b-chan", "kind": "webhook", "url": "http://127.0.0.1:9/b"});
    let name = |n: &str| json!({"name": n});
    let team_ref = json!({"team_id": a_team});
    let probes = vec![
        // No id: answers about B only.
        probe("POST", "/ingest", "/api/v1/ingest".into(), Some(b_samples), false),
        probe("GET", "/gpus", "/api/v1/gpus".into(), None, false),
        probe("GET", "/fleet/summary", "/api/v1/fleet/summary".into(), None, false),
        probe(
            "GET",
            "/reports/billing",
            format!("/api/v1/reports/billing?from={}&to={now}&group_by=team", now - 86_400_000),
            None,
            false,
        ),
        probe(
            "GET",
            "/reports/billing",
            format!("/api/v1/reports/billing?from={}&to={now}&group_by=gpu&format=csv", now - 86_400_000),
            None,
            false,
        ),
        probe("GET", "/jobs", "/api/v1/jobs?from=0&to=4102444800000".into(), None, false),
        probe("GET", "/events", "/api/v1/events".into(), None, false),
        probe("GET", "/events", format!("/api/v1/events?gpu={a_uuid}&from=0"), None, false),
        // The live stream's snapshot (`once`: the body ends after it).
        probe("GET", "/stream", "/api/v1/stream?once=true".into(), None, false),
        // Acting on waste (docs/ACTIONS.md): B's own lists, and A's policy, route and ids.
        probe("GET", "/job-runs", "/api/v1/job-runs".into(), None, false),
        probe("GET", "/job-runs/{id}", "/api/v1/job-runs/1".into(), None, true),
        probe("GET", "/jobs/{id}/report", "/api/v1/jobs/1/report".into(), None, true),
        probe("POST", "/jobs/{id}/end", "/api/v1/jobs/1/end".into(), Some(json!({})), true),
        probe("GET", "/plans", "/api/v1/plans".into(), None, false),
        probe("GET", "/reclaim-policies", "/api/v1/reclaim-policies".into(), None, false),
        probe(
            "POST",
            "/reclaim-policies",
            "/api/v1/reclaim-policies".into(),
            Some(
                json!({"name": "b-policy", "state": "idle_held", "for_s": 3600, "grace_s": 600, "action": "webhook", "action_channel_id": a_channel}),
            ),
            true,
        ),
        probe(
            "GET",
            "/reclaim-policies/{id}/dry-run",
            format!("/api/v1/reclaim-policies/{a_policy}/dry-run"),
            None,
            true,
        ),
        probe("DELETE", "/reclaim-policies/{id}", format!("/api/v1/reclaim-policies/{a_policy}"), None, true),
        probe("GET", "/reclaims", "/api/v1/reclaims".into(), None, false),
        probe("GET", "/reclaims/{id}", "/api/v1/reclaims/1".into(), None, true),
        probe("POST", "/reclaims/{id}/snooze", "/api/v1/reclaims/1/snooze".into(), Some(json!({"for_s": 3600})), true),
        probe("GET", "/report-routes", "/api/v1/report-routes".into(), None, false),
        probe(
            "POST",
            "/report-routes",
            "/api/v1/report-routes".into(),
            Some(json!({"channel_id": a_channel, "owner": "b-owner"})),
            true,
        ),
        probe("DELETE", "/report-routes/{id}", format!("/api/v1/report-routes/{a_route}"), None, true),
        probe("POST", "/agent/commands/take", format!("/api/v1/agent/commands/take?host={a_host}"), None, false),
        probe(
            "POST",
            "/agent/commands/{id}/result",
            "/api/v1/agent/commands/1/result".into(),
            Some(json!({"host": a_host, "result": "killed", "detail": "b"})),
            true,
        ),
        // Remote write without a protobuf body: refused (4xx), nothing of A.
        probe("POST", "/write", "/api/v1/write".into(), None, false),
        probe(
            "POST",
            "/jobs",
            "/api/v1/jobs".into(),
            Some(
                json!({"name": "b-job", "gpus": ["GPU-b-0001"], "from": now - 1000, "to": now, "precision": "bf16", "achieved_flops_per_s": 1.0e12}),
            ),
            false,
        ),
        probe("GET", "/prices", "/api/v1/prices".into(), None, false),
        probe(
            "PUT",
            "/prices",
            "/api/v1/prices".into(),
            Some(json!({"currency": "EUR", "source": "b", "per_gpu_hour": {"NVIDIA H100 80GB HBM3": 1.5}})),
            false,
        ),
        probe("GET", "/settings/thresholds", "/api/v1/settings/thresholds".into(), None, false),
        probe(
            "PUT",
            "/settings/thresholds",
            "/api/v1/settings/thresholds".into(),
            Some(json!({"idle_max_util_pct": 4.0})),
            false,
        ),
        probe("GET", "/alert-rules", "/api/v1/alert-rules".into(), None, false),
        probe("POST", "/alert-rules", "/api/v1/alert-rules".into(), Some(rule_body.clone()), false),
        probe("GET", "/alert-rules/fields", "/api/v1/alert-rules/fields".into(), None, false),
        probe(
            "POST",
            "/alert-rules/check",
            "/api/v1/alert-rules/check".into(),
            Some(json!({"condition": "gpu_util_pct > 1"})),
            false,
        ),
        probe("GET", "/notification-channels", "/api/v1/notification-channels".into(), None, false),
        probe(
            "POST",
            "/notification-channels",
            "/api/v1/notification-channels".into(),
            Some(channel_body.clone()),
            false,
        ),
        probe("GET", "/notification-deliveries", "/api/v1/notification-deliveries".into(), None, false),
        probe("GET", "/alerts", "/api/v1/alerts?status=all".into(), None, false),
        probe("GET", "/silences", "/api/v1/silences".into(), None, false),
        probe(
            "POST",
            "/silences",
            "/api/v1/silences".into(),
            Some(json!({"matchers": {"host": "b-host"}, "ends_at": now + 60_000, "comment": "b"})),
            false,
        ),
        probe("GET", "/auth/me", "/api/v1/auth/me".into(), None, false),
        probe(
            "PUT",
            "/auth/password",
            "/api/v1/auth/password".into(),
            Some(json!({"current_password": ADMIN_PASSWORD, "new_password": "hijacked-123"})),
            false,
        ),
        probe("GET", "/users", "/api/v1/users".into(), None, false),
        probe(
            "POST",
            "/users",
            "/api/v1/users".into(),
            Some(json!({"email": "carol@b.example", "password": "password-123", "role": "viewer"})),
            false,
        ),
        probe("GET", "/teams", "/api/v1/teams".into(), None, false),
        probe("POST", "/teams", "/api/v1/teams".into(), Some(name("b-team-2")), false),
        probe("GET", "/api-keys", "/api/v1/api-keys".into(), None, false),
        probe(
            "POST",
            "/api-keys",
            "/api/v1/api-keys".into(),
            Some(json!({"name": "b-more", "scopes": ["read"]})),
            false,
        ),
        probe("GET", "/hosts", "/api/v1/hosts".into(), None, false),
        probe("GET", "/metrics", "/metrics".into(), None, false),
        probe("GET", "/healthz", "/healthz".into(), None, false),
        probe("GET", "/readyz", "/readyz".into(), None, false),
        probe("GET", "/api/openapi.json", "/api/openapi.json".into(), None, false),
        probe(
            "POST",
            "/auth/login",
            "/api/v1/auth/login".into(),
            Some(json!({"email": ADMIN_EMAIL, "password": "guess-guess"})),
            false,
        ),
        // Organisations are the default organisation's admins' business.
        probe("GET", "/orgs", "/api/v1/orgs".into(), None, true),
        probe(
            "POST",
            "/orgs",
            "/api/v1/orgs".into(),
            Some(json!({"name": "org-c", "admin_email": "c@c.example", "admin_password": "password-123"})),
            true,
        ),
        // A's ids in the path.
        probe("GET", "/gpus/{uuid}", format!("/api/v1/gpus/{a_uuid}"), None, true),
        probe(
            "GET",
            "/gpus/{uuid}/samples",
            format!("/api/v1/gpus/{a_uuid}/samples?from=0&to=4102444800000"),
            None,
            true,
        ),
        probe("GET", "/gpus/{uuid}/states", format!("/api/v1/gpus/{a_uuid}/states"), None, true),
        probe("GET", "/gpus/{uuid}/series", format!("/api/v1/gpus/{a_uuid}/series"), None, true),
        probe(
            "PUT",
            "/gpus/{uuid}/team",
            format!("/api/v1/gpus/{a_uuid}/team"),
            Some(json!({"team_id": b_team})),
            true,
        ),
        probe("PUT", "/gpus/{uuid}/host", format!("/api/v1/gpus/{a_uuid}/host"), Some(json!({"host": "b-host"})), true),
        probe(
            "PUT",
            "/hosts/{host}/team",
            format!("/api/v1/hosts/{a_host}/team"),
            Some(json!({"team_id": b_team})),
            true,
        ),
        probe("GET", "/alert-rules/{id}", format!("/api/v1/alert-rules/{a_rule}"), None, true),
        probe("PUT", "/alert-rules/{id}", format!("/api/v1/alert-rules/{a_rule}"), Some(rule_body.clone()), true),
        probe("DELETE", "/alert-rules/{id}", format!("/api/v1/alert-rules/{a_rule}"), None, true),
        probe("GET", "/notification-channels/{id}", format!("/api/v1/notification-channels/{a_channel}"), None, true),
        probe(
            "PUT",
            "/notification-channels/{id}",
            format!("/api/v1/notification-channels/{a_channel}"),
            Some(channel_body.clone()),
            true,
        ),
        probe(
            "DELETE",
            "/notification-channels/{id}",
            format!("/api/v1/notification-channels/{a_channel}"),
            None,
            true,
        ),
        probe(
            "POST",
            "/notification-channels/{id}/test",
            format!("/api/v1/notification-channels/{a_channel}/test"),
            Some(json!({})),
            true,
        ),
        probe(
            "GET",
            "/notification-channels/{id}/deliveries",
            format!("/api/v1/notification-channels/{a_channel}/deliveries"),
            None,
            true,
        ),
        probe("GET", "/alerts/{id}", format!("/api/v1/alerts/{a_alert}"), None, true),
        probe("DELETE", "/silences/{id}", format!("/api/v1/silences/{a_silence}"), None, true),
        probe("GET", "/users/{id}", format!("/api/v1/users/{a_user}"), None, true),
        probe(
            "PUT",
            "/users/{id}",
            format!("/api/v1/users/{a_user}"),
            Some(json!({"role": "admin", "password": "hijacked-123"})),
            true,
        ),
        probe("DELETE", "/users/{id}", format!("/api/v1/users/{a_user}"), None, true),
        probe("GET", "/teams/{id}", format!("/api/v1/teams/{a_team}"), None, true),
        probe("PUT", "/teams/{id}", format!("/api/v1/teams/{a_team}"), Some(name("renamed")), true),
        probe("DELETE", "/teams/{id}", format!("/api/v1/teams/{a_team}"), None, true),
        probe("PUT", "/teams/{id}/members/{user_id}", format!("/api/v1/teams/{a_team}/members/{b_user}"), None, true),
        probe("PUT", "/teams/{id}/members/{user_id}", format!("/api/v1/teams/{b_team}/members/{a_user}"), None, true),
        probe(
            "DELETE",
            "/teams/{id}/members/{user_id}",
            format!("/api/v1/teams/{a_team}/members/{a_user}"),
            None,
            true,
        ),
        probe("GET", "/api-keys/{id}", format!("/api/v1/api-keys/{a_key_id}"), None, true),
        probe("DELETE", "/api-keys/{id}", format!("/api/v1/api-keys/{a_key_id}"), None, true),
        // A's ids in the body of B's own resources.
        probe(
            "POST",
            "/api-keys",
            "/api/v1/api-keys".into(),
            Some(json!({"name": "b-x", "scopes": ["ingest"], "team_id": a_team})),
            true,
        ),
        probe("PUT", "/hosts/{host}/team", "/api/v1/hosts/b-host/team".into(), Some(team_ref.clone()), true),
        probe("PUT", "/gpus/{uuid}/team", "/api/v1/gpus/GPU-b-0001/team".into(), Some(team_ref), true),
        probe(
            "POST",
            "/alert-rules",
            "/api/v1/alert-rules".into(),
            Some(json!({"name": "b-rule-2", "condition": "gpu_util_pct >= 1", "channels": [a_channel]})),
            true,
        ),
    ];

    // The sweep covers every route of the server (a new route must be added here).
    let covered: BTreeSet<(String, String)> =
        probes.iter().map(|p| (p.method.to_string(), p.route.to_string())).collect();
    let routes = server_routes(&server).await;
    let mut missing: Vec<&(String, String)> = routes.iter().filter(|r| !covered.contains(*r)).collect();
    missing.retain(|(m, p)| !(m == "POST" && p == "/auth/logout")); // swept below, on its own session
    assert!(missing.is_empty(), "routes the isolation sweep does not cover: {missing:?}");
    let stale: Vec<&(String, String)> = covered.iter().filter(|r| !routes.contains(*r)).collect();
    assert!(stale.is_empty(), "the sweep probes routes the server no longer has: {stale:?}");

    let callers = [("B's key", b_key.clone()), ("B's session", bs.clone())];
    for (who, auth) in &callers {
        for p in &probes {
            let r = send(&server, p.method, &p.url, auth, p.body.as_ref()).await;
            let what = format!(
                "{who}: {} {} → {} {}",
                p.method,
                p.url,
                r.status,
                r.text.chars().take(300).collect::<String>()
            );
            assert!(r.status < 500, "{what}");
            if p.targets_a {
                // 422 only where a body may be refused before its target is looked up, or
                // names A's id as unknown.
                let refused = r.status == 403 || r.status == 404 || (r.status == 422 && p.body.is_some());
                assert!(refused, "{what}");
            }
            // What B sent may come back (an error naming the id); nothing else of A may.
            let sent = format!("{} {}", p.url, p.body.as_ref().map(Value::to_string).unwrap_or_default());
            for m in markers.iter().filter(|m| !sent.contains(**m)) {
                assert!(!r.text.contains(m), "A's {m:?} shown to B: {what}");
            }
        }
    }
    // Logout ends only the session it is sent with.
    let throwaway = Auth::Session(login(&server, "bob@b.example", "b-password-123").await);
    assert_eq!(post(&server, "/api/v1/auth/logout", &throwaway, json!({})).await.status, 204);
    assert_eq!(get(&server, "/api/v1/auth/me", &bs).await.status, 200);

    // Nothing of A changed.
    let after = a_snapshot(&server, a_uuid).await;
    for ((path, b4), (_, af)) in before.iter().zip(&after) {
        assert_eq!(b4, af, "A's {path} changed during B's sweep");
    }
    assert_eq!(
        get(&server, "/api/v1/auth/me", &Auth::Key(a_key_secret.clone())).await.status,
        200,
        "A's key still works"
    );
    assert_eq!(try_login(&server, "alice@a.example", "password-123").await.status, 200);
    assert_eq!(try_login(&server, ADMIN_EMAIL, ADMIN_PASSWORD).await.status, 200);

    // B reporting A's GPU uuid and host name makes B's own GPU; A's stays as it was.
    let a_gpu_before = get(&server, &format!("/api/v1/gpus/{a_uuid}"), &a).await.body;
    let r = ingest(&server, &b_key, a_host, json!({"team": "a-team-zeta"}), hollow_samples(a_uuid, 3, 1000)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let a_gpu_after = get(&server, &format!("/api/v1/gpus/{a_uuid}"), &a).await.body;
    assert_eq!(a_gpu_before["latest"], a_gpu_after["latest"]);
    let a_hosts = get(&server, "/api/v1/hosts", &a).await.body;
    assert_eq!(a_hosts[0]["gpus"][0]["team_id"].as_i64(), Some(a_team));
    let b_teams = get(&server, "/api/v1/teams", &b_key).await.body;
    assert!(b_teams.as_array().unwrap().iter().all(|t| t["id"].as_i64() != Some(a_team)));
    let b_gpu = get(&server, &format!("/api/v1/gpus/{a_uuid}"), &b_key).await;
    assert_eq!(b_gpu.status, 200);
    assert_ne!(b_gpu.body["latest"], a_gpu_before["latest"]);
}
