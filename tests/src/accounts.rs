//! Requests as the account tests make them: with no credentials, an API key or a browser
//! session (cookie and CSRF token), answered with status, headers, text and JSON together.

use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::{ADMIN_TOKEN, Backend, TestDatabase, TestServer};

/// The bootstrap admin the account tests start their servers with.
pub const ADMIN_EMAIL: &str = "admin@a.example";
pub const ADMIN_PASSWORD: &str = "a-admin-password-1";

/// A server on a fresh database with the bootstrap admin and `extra` arguments.
pub async fn start(backend: Backend, extra: &[&str]) -> (TestDatabase, TestServer) {
    let db = TestDatabase::new(backend).await;
    let server = spawn(&db, extra, &[]);
    (db, server)
}

/// A server on `db` with the bootstrap admin (its password unless `extra` gives one), `extra`
/// arguments and environment changes (see [`TestServer::spawn_env`]).
pub fn spawn(db: &TestDatabase, extra: &[&str], env: &[(&str, Option<&str>)]) -> TestServer {
    let mut args = vec!["--admin-email", ADMIN_EMAIL];
    if !extra.contains(&"--admin-password") {
        args.extend(["--admin-password", ADMIN_PASSWORD]);
    }
    args.extend_from_slice(extra);
    TestServer::spawn_env(&db.url, "127.0.0.1:0", &args, env)
}

/// A logged-in browser session.
#[derive(Debug, Clone)]
pub struct Session {
    /// `name=value`, as a browser sends it back.
    pub cookie: String,
    pub csrf: String,
}

/// How a request authenticates.
#[derive(Debug, Clone)]
pub enum Auth {
    None,
    Key(String),
    Session(Session),
}

/// The admin API key the test servers start with.
pub fn admin() -> Auth {
    Auth::Key(ADMIN_TOKEN.into())
}

/// An answer: status, headers, body as text and as JSON (`Null` where it is not JSON).
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    pub body: Value,
}

/// `method path` as `auth`, from the client address `xff` (`X-Forwarded-For`; none if empty).
pub async fn send_from(
    server: &TestServer,
    method: &str,
    path: &str,
    auth: &Auth,
    body: Option<&Value>,
    xff: &str,
) -> Resp {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = reqwest::Client::new().request(method, server.url(path));
    match auth {
        Auth::None => {}
        Auth::Key(k) => req = req.bearer_auth(k),
        Auth::Session(s) => req = req.header("cookie", &s.cookie).header("x-csrf-token", &s.csrf),
    }
    if !xff.is_empty() {
        req = req.header("x-forwarded-for", xff);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp { status, headers, text, body }
}

pub async fn send(server: &TestServer, method: &str, path: &str, auth: &Auth, body: Option<&Value>) -> Resp {
    send_from(server, method, path, auth, body, "").await
}

pub async fn get(server: &TestServer, path: &str, auth: &Auth) -> Resp {
    send(server, "GET", path, auth, None).await
}

pub async fn post(server: &TestServer, path: &str, auth: &Auth, body: Value) -> Resp {
    send(server, "POST", path, auth, Some(&body)).await
}

pub async fn put(server: &TestServer, path: &str, auth: &Auth, body: Value) -> Resp {
    send(server, "PUT", path, auth, Some(&body)).await
}

/// `POST /auth/login` from the client address `xff` (none if empty).
pub async fn try_login_from(server: &TestServer, email: &str, password: &str, xff: &str) -> Resp {
    let body = json!({"email": email, "password": password});
    send_from(server, "POST", "/api/v1/auth/login", &Auth::None, Some(&body), xff).await
}

pub async fn try_login(server: &TestServer, email: &str, password: &str) -> Resp {
    try_login_from(server, email, password, "").await
}

/// Log in (it must succeed): the session's cookie and CSRF token.
pub async fn login(server: &TestServer, email: &str, password: &str) -> Session {
    let r = try_login(server, email, password).await;
    assert_eq!(r.status, 200, "login {email}: {}", r.text);
    let set_cookie = r.headers.get("set-cookie").expect("set-cookie").to_str().unwrap().to_string();
    let cookie = set_cookie.split(';').next().unwrap().trim().to_string();
    Session { cookie, csrf: r.body["csrf_token"].as_str().expect("csrf_token").to_string() }
}
