//! View state kept in the address's query (`?state=idle&sort=util`), so that a view can be
//! shared as a link and Back/Forward move between views.

use leptos::prelude::*;
use leptos_router::NavigateOptions;
use leptos_router::hooks::{use_location, use_navigate, use_query_map};

/// A setter for one query parameter of the current page: the address is replaced (no new
/// history entry per keystroke or choice, no scroll to the top); an empty value removes it.
pub fn query_setter() -> impl Fn(&str, &str) + Clone + 'static {
    let set = query_updater();
    move |key: &str, value: &str| set(&[(key, value)])
}

/// [`query_setter`] for several parameters at once (one address change): each `(key, value)`
/// replaces that key's value; an empty value removes the key.
pub fn query_updater() -> impl Fn(&[(&str, &str)]) + Clone + 'static {
    let navigate = use_navigate();
    let location = use_location();
    let query = use_query_map();
    move |changes: &[(&str, &str)]| {
        let mut params: Vec<(String, String)> = query.with_untracked(|q| {
            q.into_iter()
                .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        });
        params.extend(changes.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.to_string(), v.to_string())));
        let to = with_query(&location.pathname.get_untracked(), &params);
        navigate(&to, NavigateOptions { replace: true, scroll: false, ..Default::default() });
    }
}

/// `path?k=v&…`, each key and value percent-encoded; `path` alone without parameters.
pub fn with_query(path: &str, params: &[(String, String)]) -> String {
    let mut out = path.to_string();
    for (i, (k, v)) in params.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(&encode(k));
        out.push('=');
        out.push_str(&encode(v));
    }
    out
}

/// What `encodeURIComponent` keeps as it is: letters, digits and `-_.!~*'()`.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// `encodeURIComponent` (the browser's rule), in Rust so that it runs in native unit tests too:
/// a query value, a path segment, a `next` address.
pub fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::with_query;

    #[test]
    fn queries_are_encoded_in_order() {
        assert_eq!(with_query("/gpus", &[]), "/gpus");
        let p = [("state".to_string(), "idle".to_string()), ("q".to_string(), "a b&c/é".to_string())];
        assert_eq!(with_query("/gpus", &p), "/gpus?state=idle&q=a%20b%26c%2F%C3%A9");
    }
}
