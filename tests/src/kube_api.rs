//! A recorded Kubernetes API server: a real HTTP server (axum) answering the requests the
//! agent's `kube` client makes — list, watch and get, full objects or metadata only
//! (`PartialObjectMetadata`) — in the API's own shapes: `resourceVersion`s, paged lists
//! (`limit` / `continue`), `fieldSelector`, watches as chunked newline-delimited events
//! (ADDED / MODIFIED / DELETED), `410 Gone` for an expired resource version, `Status` errors.
//!
//! No real API server can be installed on the development machines (no Kubernetes release is
//! in the package registries they reach), so the agent's watches are tested against this
//! stand-in; the objects it serves are written in the shapes `kubectl get -o json` gives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One resource collection: objects by (namespace, name) and the change log watches replay.
#[derive(Default)]
struct Collection {
    objects: BTreeMap<(String, String), Value>,
    /// (resource version, event type, object as of the event).
    log: Vec<(u64, &'static str, Value)>,
}

#[derive(Default)]
struct ApiState {
    /// The cluster's resource version: one counter for every collection, as etcd's.
    rv: u64,
    /// Watches from a resource version below this get `410 Gone`.
    oldest_rv: u64,
    /// Collections by plural (`pods`, `namespaces`, `jobs`, `rayclusters`).
    collections: BTreeMap<String, Collection>,
    /// Every request, `VERB path?query`.
    requests: Vec<String>,
}

#[derive(Clone)]
struct Shared {
    state: Arc<Mutex<ApiState>>,
    changed: tokio::sync::watch::Sender<u64>,
}

/// The recorded API server, serving until dropped.
pub struct RecordedApiServer {
    shared: Shared,
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

fn key_of(obj: &Value) -> (String, String) {
    let m = &obj["metadata"];
    (m["namespace"].as_str().unwrap_or("").to_string(), m["name"].as_str().expect("an object has a name").to_string())
}

fn plural_of(obj: &Value) -> String {
    match obj["kind"].as_str().expect("an object has a kind") {
        "Pod" => "pods".into(),
        "Namespace" => "namespaces".into(),
        "Job" => "jobs".into(),
        "RayCluster" => "rayclusters".into(),
        other => format!("{}s", other.to_ascii_lowercase()),
    }
}

/// The object as a metadata-only request gets it.
fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// `fieldSelector` as the agent uses it: `spec.nodeName=…`, `metadata.name=…`, comma-joined.
fn matches_fields(obj: &Value, selector: Option<&str>) -> bool {
    selector.is_none_or(|sel| {
        sel.split(',').filter(|t| !t.is_empty()).all(|term| {
            let Some((path, want)) = term.split_once('=') else { return false };
            let want = want.trim_start_matches('=');
            let got = path.split('.').fold(obj, |v, seg| &v[seg]);
            got.as_str().unwrap_or("") == want
        })
    })
}

impl RecordedApiServer {
    /// Serves on a free port of 127.0.0.1 (needs a tokio runtime).
    pub async fn start() -> RecordedApiServer {
        let (changed, _) = tokio::sync::watch::channel(0);
        let shared = Shared { state: Arc::default(), changed };
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RecordedApiServer { shared, url, task }
    }

    fn bump(&self, st: &mut ApiState) -> u64 {
        st.rv += 1;
        st.rv
    }

    /// Creates or replaces an object (its `kind` says the collection); watches see ADDED or
    /// MODIFIED.
    pub fn apply(&self, mut obj: Value) {
        let mut st = self.shared.state.lock().unwrap();
        let rv = self.bump(&mut st);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{rv:012}"));
        }
        let col = st.collections.entry(plural_of(&obj)).or_default();
        let kind = if col.objects.insert(key_of(&obj), obj.clone()).is_some() { "MODIFIED" } else { "ADDED" };
        col.log.push((rv, kind, obj));
        drop(st);
        self.shared.changed.send_replace(rv);
    }

    /// Serves the objects of a fixture file (`{"objects": [...]}`, tests/fixtures/kube-api).
    pub fn apply_fixture(&self, path: &std::path::Path) {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let doc: Value = serde_json::from_str(&text).unwrap();
        for obj in doc["objects"].as_array().expect("objects") {
            self.apply(obj.clone());
        }
    }

    /// An object as served now.
    pub fn object(&self, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        let st = self.shared.state.lock().unwrap();
        st.collections.get(plural)?.objects.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// Deletes an object; watches see DELETED.
    pub fn delete(&self, plural: &str, namespace: &str, name: &str) {
        let mut st = self.shared.state.lock().unwrap();
        let rv = self.bump(&mut st);
        let col = st.collections.entry(plural.to_string()).or_default();
        let mut obj =
            col.objects.remove(&(namespace.to_string(), name.to_string())).expect("deleting an object that exists");
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        col.log.push((rv, "DELETED", obj));
        drop(st);
        self.shared.changed.send_replace(rv);
    }

    /// Changes an object while the history is compacted: no watch hears of it, every open
    /// watch ends with `410 Gone` (as etcd compaction does), and only a new list shows it.
    pub fn apply_and_expire_watches(&self, mut obj: Value) {
        let mut st = self.shared.state.lock().unwrap();
        let rv = self.bump(&mut st);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let col = st.collections.entry(plural_of(&obj)).or_default();
        col.objects.insert(key_of(&obj), obj);
        st.oldest_rv = rv + 1;
        drop(st);
        self.shared.changed.send_replace(rv);
    }

    /// The requests so far, `LIST|WATCH|GET path?query (metadata|full)`, the query as sent.
    pub fn requests(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().requests.clone()
    }
}

impl Drop for RecordedApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `/api/v1/pods`, `/apis/batch/v1/namespaces/ml/jobs/x` → (plural, namespace, name).
fn parse_path(path: &str) -> Option<(String, Option<String>, Option<String>)> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segs.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    match rest {
        [plural] => Some((plural.to_string(), None, None)),
        ["namespaces", ns, plural, name] => Some((plural.to_string(), Some(ns.to_string()), Some(name.to_string()))),
        _ => None,
    }
}

async fn handle(State(shared): State<Shared>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let query: BTreeMap<String, String> =
        req.uri().query().map(|q| url_decode_pairs(q).into_iter().collect()).unwrap_or_default();
    let metadata_only = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"));
    let Some((plural, ns, name)) = parse_path(&path) else {
        return json_response(
            StatusCode::NOT_FOUND,
            &status(404, "NotFound", "the server could not find the requested resource"),
        );
    };
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = if name.is_some() {
        "GET"
    } else if watch {
        "WATCH"
    } else {
        "LIST"
    };
    let shape_word = if metadata_only { "metadata" } else { "full" };
    shared
        .state
        .lock()
        .unwrap()
        .requests
        .push(format!("{verb} {path}?{} ({shape_word})", req.uri().query().unwrap_or("")));
    let shape = move |o: &Value| if metadata_only { partial(o) } else { o.clone() };
    if let (Some(ns), Some(name)) = (ns, name) {
        let st = shared.state.lock().unwrap();
        return match st.collections.get(&plural).and_then(|c| c.objects.get(&(ns, name.clone()))) {
            Some(o) => json_response(StatusCode::OK, &shape(o)),
            None => json_response(
                StatusCode::NOT_FOUND,
                &status(404, "NotFound", &format!("{plural} \"{name}\" not found")),
            ),
        };
    }
    let selector = query.get("fieldSelector").cloned();
    if !watch {
        let st = shared.state.lock().unwrap();
        let all: Vec<&Value> = st
            .collections
            .get(&plural)
            .map(|c| c.objects.values().filter(|o| matches_fields(o, selector.as_deref())).collect())
            .unwrap_or_default();
        let offset: usize = query.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
        let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
        let page: Vec<Value> = all.iter().skip(offset).take(limit).map(|o| shape(o)).collect();
        let next = offset.saturating_add(limit);
        let mut meta = json!({"resourceVersion": st.rv.to_string()});
        if next < all.len() {
            meta["continue"] = json!(next.to_string());
        }
        let kind = if metadata_only { "PartialObjectMetadataList".to_string() } else { "List".to_string() };
        let api_version = if metadata_only { "meta.k8s.io/v1" } else { "v1" };
        return json_response(
            StatusCode::OK,
            &json!({"kind": kind, "apiVersion": api_version, "metadata": meta, "items": page}),
        );
    }
    // A watch: the events after the asked resource version, then the new ones as they come,
    // one JSON object per line in a chunked body; 410 Gone once the history is compacted.
    let from: u64 = query.get("resourceVersion").and_then(|r| r.parse().ok()).unwrap_or(0);
    let rx = shared.changed.subscribe();
    let stream = futures::stream::unfold((from, rx, false), move |(seen, mut rx, done)| {
        let shared = shared.clone();
        let plural = plural.clone();
        let selector = selector.clone();
        async move {
            if done {
                return None;
            }
            loop {
                {
                    let st = shared.state.lock().unwrap();
                    // Expired: the watch has not seen the change the compaction hid.
                    if seen + 1 < st.oldest_rv {
                        let gone =
                            status(410, "Expired", &format!("too old resource version: {seen} ({})", st.oldest_rv));
                        let line = format!("{}\n", json!({"type": "ERROR", "object": gone}));
                        return Some((Ok::<_, std::io::Error>(line), (seen, rx, true)));
                    }
                    let next = st.collections.get(&plural).and_then(|c| {
                        c.log.iter().find(|(rv, _, o)| *rv > seen && matches_fields(o, selector.as_deref()))
                    });
                    if let Some((rv, kind, obj)) = next {
                        let line = format!("{}\n", json!({"type": kind, "object": shape(obj)}));
                        return Some((Ok(line), (*rv, rx, false)));
                    }
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// `a=b&c=d%3De` → pairs, percent-decoded (`+` is a space).
fn url_decode_pairs(q: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' if i + 2 < bytes.len() => {
                    let hex =
                        std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                    match hex {
                        Some(b) => {
                            out.push(b);
                            i += 3;
                        }
                        None => {
                            out.push(b'%');
                            i += 1;
                        }
                    }
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}
