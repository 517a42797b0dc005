//! The documentation's HTTP examples, run against the real server on SQLite and PostgreSQL, so
//! that README.md and docs/*.md cannot drift from what the server does.
//!
//! An example is a fenced block whose info string is `http test` (GitHub still highlights it as
//! HTTP): a request, then the response the docs promise.
//!
//! ````text
//! ```http test
//! POST /api/v1/api-keys
//! Authorization: Bearer $FLEETLENS_ADMIN_TOKEN
//! Content-Type: application/json
//!
//! {"name": "gpu-hosts", "scopes": ["ingest"]}
//!
//! HTTP/1.1 201 Created
//!
//! {"id": $KEY_ID, "key": "$INGEST_KEY", "scopes": ["ingest"]}
//! ```
//! ````
//!
//! - The blocks of one file run in order against one fresh server (started with the admin key
//!   `$FLEETLENS_ADMIN_TOKEN`); `$NOW_MS` is the time the file started.
//! - In the response, a `$NAME` value (bare or quoted) *captures* what the server answered there;
//!   later requests use it (`GET /api/v1/alert-rules/$KEY_ID`). A string with `…` matches any
//!   text in its place; `"…"` alone matches any value.
//! - The response body is matched as a subset: every field the docs show must be there with that
//!   value (numbers equal, objects field by field, each array element the docs show matched by
//!   some element of the answer); fields the docs leave out are not checked. A body that is not
//!   JSON (CSV) is matched as text, `…` standing for any text. Headers the docs show are matched
//!   the same way (`Set-Cookie: fleetlens_session=$SESSION; …`).
//! - `http test retry` repeats the request for up to 20 s until the answer matches (for what
//!   the alert engine does in the background).
//! - A request with a body and no `Content-Type` is sent as `application/json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetlens_tests::{ADMIN_TOKEN, Backend, TestDatabase, TestServer};
use serde_json::Value;

fleetlens_tests::for_each_backend!(readme, api_md, alerting_md, accounts_md, every_file_with_examples_is_run);

async fn readme(backend: Backend) {
    assert!(run_file(backend, &repo().join("README.md")).await >= 2);
}

async fn api_md(backend: Backend) {
    assert!(run_file(backend, &repo().join("docs/API.md")).await >= 5);
}

async fn alerting_md(backend: Backend) {
    assert!(run_file(backend, &repo().join("docs/ALERTING.md")).await >= 5);
}

async fn accounts_md(backend: Backend) {
    assert!(run_file(backend, &repo().join("docs/ACCOUNTS.md")).await >= 5);
}

/// Examples in any other file of docs/ run too (a new file's examples are not forgotten).
async fn every_file_with_examples_is_run(backend: Backend) {
    let covered = ["README.md", "API.md", "ALERTING.md", "ACCOUNTS.md"];
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| !covered.iter().any(|c| p.ends_with(c)))
        .collect();
    files.sort();
    for f in files {
        if !examples(&f).is_empty() {
            run_file(backend, &f).await;
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_path_buf()
}

/// One `http test` block.
#[derive(Debug)]
struct Example {
    /// `file:line` of the block, for messages.
    at: String,
    retry: bool,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
    status: u16,
    response_headers: Vec<(String, String)>,
    response_body: String,
}

fn examples(file: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let name = file.strip_prefix(repo()).unwrap_or(file).display().to_string();
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let info = line.trim_start().strip_prefix("```").map(str::trim);
        let Some(info) = info.filter(|i| i.starts_with("http test")) else { continue };
        let retry = info.split_whitespace().any(|w| w == "retry");
        let block: Vec<&str> =
            lines.by_ref().map(|(_, l)| l).take_while(|l| !l.trim_start().starts_with("```")).collect();
        out.push(parse_example(format!("{name}:{}", n + 1), retry, &block));
    }
    out
}

fn parse_example(at: String, retry: bool, block: &[&str]) -> Example {
    let split = block
        .iter()
        .position(|l| l.starts_with("HTTP/1.1 "))
        .unwrap_or_else(|| panic!("{at}: no `HTTP/1.1 <status>` line: the example must say what it answers"));
    let (request, response) = block.split_at(split);
    let (request_line, headers, body) = message(request);
    let mut words = request_line.split_whitespace();
    let method = words.next().unwrap_or_else(|| panic!("{at}: empty request")).to_string();
    let path = words.next().unwrap_or_else(|| panic!("{at}: no path")).to_string();
    let (status_line, response_headers, response_body) = message(response);
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{at}: bad status line {status_line:?}"));
    Example { at, retry, method, path, headers, body, status, response_headers, response_body }
}

/// First line, headers up to the first blank line, then the body.
fn message(lines: &[&str]) -> (String, Vec<(String, String)>, String) {
    let first = lines.first().map(|l| l.trim().to_string()).unwrap_or_default();
    let mut headers = Vec::new();
    let mut rest = lines.iter().skip(1);
    for l in rest.by_ref() {
        if l.trim().is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap_or_else(|| panic!("header line without `:`: {l:?}"));
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let body = rest.copied().collect::<Vec<_>>().join("\n").trim().to_string();
    (first, headers, body)
}

/// Run every example of `file` in order against a fresh server; the number run.
async fn run_file(backend: Backend, file: &Path) -> usize {
    let list = examples(file);
    let db = TestDatabase::new(backend).await;
    let server = TestServer::spawn(&db.url, &[]);
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let mut vars: HashMap<String, String> = HashMap::new();
    vars.insert("FLEETLENS_ADMIN_TOKEN".into(), ADMIN_TOKEN.into());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    vars.insert("NOW_MS".into(), now.to_string());
    for ex in &list {
        run_example(&client, &server, ex, &mut vars).await;
    }
    list.len()
}

async fn run_example(client: &reqwest::Client, server: &TestServer, ex: &Example, vars: &mut HashMap<String, String>) {
    let deadline = Instant::now() + Duration::from_secs(if ex.retry { 20 } else { 0 });
    loop {
        let (status, headers, body) = send(client, server, ex, vars).await;
        let mut captured = vars.clone();
        let verdict = check(ex, status, &headers, &body, &mut captured);
        match verdict {
            Ok(()) => {
                *vars = captured;
                return;
            }
            Err(why) if Instant::now() >= deadline => panic!(
                "{}: {} {} does not answer as documented: {why}\n  got {status}: {body}",
                ex.at, ex.method, ex.path
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn send(
    client: &reqwest::Client,
    server: &TestServer,
    ex: &Example,
    vars: &HashMap<String, String>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let method: reqwest::Method = ex.method.parse().unwrap_or_else(|_| panic!("{}: method {}", ex.at, ex.method));
    let path = substitute(&ex.at, &ex.path, vars);
    let mut req = client.request(method, server.url(&path));
    let mut has_type = false;
    for (k, v) in &ex.headers {
        if k.eq_ignore_ascii_case("host") {
            continue;
        }
        has_type |= k.eq_ignore_ascii_case("content-type");
        req = req.header(k.as_str(), substitute(&ex.at, v, vars));
    }
    if !ex.body.is_empty() {
        if !has_type {
            req = req.header("content-type", "application/json");
        }
        req = req.body(substitute(&ex.at, &ex.body, vars));
    }
    let resp = req.send().await.unwrap_or_else(|e| panic!("{}: no answer: {e}", ex.at));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.text().await.unwrap_or_default();
    (status, headers, body)
}

/// `$NAME` → its value (strings without their quotes).
fn substitute(at: &str, text: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' || !chars.peek().is_some_and(|n| n.is_ascii_uppercase()) {
            out.push(c);
            continue;
        }
        let mut name = String::new();
        while let Some(&n) = chars.peek().filter(|n| n.is_ascii_uppercase() || n.is_ascii_digit() || **n == '_') {
            name.push(n);
            chars.next();
        }
        let value = vars.get(&name).unwrap_or_else(|| panic!("{at}: ${name} is used before an example captures it"));
        out.push_str(value);
    }
    out
}

fn check(
    ex: &Example,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    body: &str,
    vars: &mut HashMap<String, String>,
) -> Result<(), String> {
    if status != ex.status {
        return Err(format!("status {status}, the docs say {}", ex.status));
    }
    for (name, want) in &ex.response_headers {
        let found = headers
            .get_all(name.as_str())
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| glob(want, v, &mut vars.clone()));
        match found {
            Some(v) => {
                glob(want, v, vars);
            }
            None => return Err(format!("no header `{name}: {want}`")),
        }
    }
    if ex.response_body.is_empty() {
        return Ok(());
    }
    match serde_json::from_str::<Value>(&quote_bare_variables(&ex.response_body)) {
        Ok(want) => {
            let got: Value = serde_json::from_str(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
            matches(&want, &got, "", vars)
        }
        Err(_) if glob(&ex.response_body, body.trim(), vars) => Ok(()),
        Err(_) => Err(format!("the body does not match the documented text {:?}", ex.response_body)),
    }
}

/// `{"id": $ID}` → `{"id": "$ID"}`, so the documented body parses as JSON.
fn quote_bare_variables(text: &str) -> String {
    let mut out = String::new();
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if c == '$' {
            out.push_str("\"$");
            while let Some(&n) = chars.peek().filter(|n| n.is_ascii_alphanumeric() || **n == '_') {
                out.push(n);
                chars.next();
            }
            out.push('"');
        } else {
            out.push(c);
        }
    }
    out
}

fn capture_name(s: &str) -> Option<&str> {
    let name = s.strip_prefix('$')?;
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).then_some(name)
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn matches(want: &Value, got: &Value, path: &str, vars: &mut HashMap<String, String>) -> Result<(), String> {
    let here = if path.is_empty() { "the body".to_string() } else { format!("`{path}`") };
    match want {
        Value::String(s) if s == "…" => Ok(()),
        Value::String(s) if capture_name(s).is_some() => {
            let name = capture_name(s).expect("checked");
            vars.insert(name.to_string(), text_of(got));
            Ok(())
        }
        Value::String(s) if s.contains('…') || s.contains('$') => match got {
            Value::String(g) if glob(s, g, vars) => Ok(()),
            _ => Err(format!("{here} is {got}, the docs say {s:?}")),
        },
        Value::Number(w) => match got.as_f64() {
            Some(g) if (g - w.as_f64().expect("a number")).abs() <= 1e-9 * g.abs().max(1.0) => Ok(()),
            _ => Err(format!("{here} is {got}, the docs say {w}")),
        },
        Value::Object(fields) => {
            let Value::Object(got_fields) = got else { return Err(format!("{here} is {got}, not an object")) };
            for (k, w) in fields {
                let sub = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                let g = got_fields.get(k).ok_or_else(|| format!("`{sub}` is missing"))?;
                matches(w, g, &sub, vars)?;
            }
            Ok(())
        }
        Value::Array(items) => {
            let Value::Array(got_items) = got else { return Err(format!("{here} is {got}, not an array")) };
            if items.is_empty() && !got_items.is_empty() {
                return Err(format!("{here} is {got}, the docs say []"));
            }
            for (i, w) in items.iter().enumerate() {
                let found = got_items.iter().find_map(|g| {
                    let mut trial = vars.clone();
                    matches(w, g, &format!("{path}[{i}]"), &mut trial).ok().map(|()| trial)
                });
                match found {
                    Some(trial) => *vars = trial,
                    None => return Err(format!("no element of {here} matches {w}")),
                }
            }
            Ok(())
        }
        other if other == got => Ok(()),
        other => Err(format!("{here} is {got}, the docs say {other}")),
    }
}

/// `text` matches `pattern` where `…` is any text and `$NAME` captures a run of characters
/// other than `;`, `,`, `"` and spaces.
fn glob(pattern: &str, text: &str, vars: &mut HashMap<String, String>) -> bool {
    if let Some(rest) = pattern.strip_prefix('…') {
        return (0..=text.len()).filter(|i| text.is_char_boundary(*i)).any(|i| glob(rest, &text[i..], vars));
    }
    if pattern.starts_with('$') && pattern[1..].starts_with(|c: char| c.is_ascii_uppercase()) {
        let name_len = pattern[1..]
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(pattern.len() - 1);
        let (name, rest) = (&pattern[1..=name_len], &pattern[1 + name_len..]);
        let end = text.find([';', ',', '"', ' ']).unwrap_or(text.len());
        if end == 0 {
            return false;
        }
        vars.insert(name.to_string(), text[..end].to_string());
        return glob(rest, &text[end..], vars);
    }
    match (pattern.chars().next(), text.chars().next()) {
        (None, None) => true,
        (Some(p), Some(t)) if p == t => glob(&pattern[p.len_utf8()..], &text[t.len_utf8()..], vars),
        _ => false,
    }
}

#[test]
fn the_matcher_is_strict_where_the_docs_are_specific() {
    let mut vars = HashMap::new();
    let want: Value =
        serde_json::from_str(&quote_bare_variables(r#"{"id": $ID, "rows": [{"n": 2}], "s": "a…z"}"#)).unwrap();
    let got: Value = serde_json::json!({"id": 7, "rows": [{"n": 1}, {"n": 2, "x": 0}], "s": "abcz", "extra": 1});
    assert_eq!(matches(&want, &got, "", &mut vars), Ok(()));
    assert_eq!(vars["ID"], "7");
    let bad: Value = serde_json::json!({"id": 7, "rows": [{"n": 1}], "s": "abcz"});
    assert!(matches(&want, &bad, "", &mut vars).is_err());
    assert!(glob("fleetlens_session=$S; …", "fleetlens_session=abc; HttpOnly", &mut vars));
    assert_eq!(vars["S"], "abc");
    assert!(!glob("a…b", "acc", &mut vars));
}
