//! Outbound HTTP for notifications (webhook, Slack, Alertmanager channels): the only requests
//! the server makes to addresses that users choose, so the only way an org admin could make the
//! server reach what it can reach and they cannot (its own API, the database, cloud metadata,
//! the cluster's internal services).
//!
//! Every address is checked when the connection is made, not when the channel is saved: a
//! host name is resolved by [`GuardedResolver`], which hands reqwest only the addresses the
//! policy permits (so a DNS answer that changes after the check cannot slip through), and a
//! literal IP in the URL, which reqwest connects to without resolving, is checked by
//! [`EgressPolicy::check_url`] before the request. Redirects are never followed, proxies from
//! the environment are not used (a proxy would resolve the target itself, out of our sight),
//! at most [`MAX_ANSWER_BYTES`] of an answer are read, and an answer's body never reaches the
//! delivery log. Errors never carry the URL: webhook URLs are secrets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The most of an answer's body the sender reads (then drops unread).
pub const MAX_ANSWER_BYTES: usize = 4096;

/// An outbound connection the policy refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EgressRefused {
    #[error(
        "refused to connect to {addr} ({reason}): notifications may not reach internal addresses unless \
         the operator allows them with --webhook-allow-cidrs"
    )]
    Address { addr: IpAddr, reason: &'static str },
    #[error(
        "refused to connect: the channel's host resolves only to internal addresses ({0}) that \
         --webhook-allow-cidrs does not allow"
    )]
    Resolved(String),
    #[error("the channel's host has no address")]
    NoAddress,
}

/// Which destination addresses outbound notifications may reach.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    /// Internal ranges the operator allows (`--webhook-allow-cidrs`).
    allow: Vec<IpNet>,
}

impl EgressPolicy {
    pub fn new(allow: Vec<IpNet>) -> Self {
        EgressPolicy { allow }
    }

    /// `Ok` when a notification may be sent to `addr`.
    pub fn check(&self, addr: IpAddr) -> Result<(), EgressRefused> {
        if self.allow.iter().any(|net| net.contains(&addr)) {
            return Ok(());
        }
        // An IPv6 form of an IPv4 address is allowed as that IPv4 address is.
        if let Some(v4) = embedded_ipv4(addr)
            && self.allow.iter().any(|net| net.contains(&IpAddr::V4(v4)))
        {
            return Ok(());
        }
        match internal_reason(addr) {
            Some(reason) => Err(EgressRefused::Address { addr, reason }),
            None => Ok(()),
        }
    }

    /// Check a URL whose host is a literal IP address (reqwest connects to those without
    /// asking the resolver); host names are checked by [`GuardedResolver`] at connect time.
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), EgressRefused> {
        // The URL parser writes IP hosts in canonical form (`http://2130706433/` is
        // `127.0.0.1`), IPv6 ones in brackets.
        let host = url.host_str().unwrap_or_default();
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(addr) => self.check(addr),
            Err(_) => Ok(()),
        }
    }

    /// The permitted addresses among `addrs`, or why none is.
    fn permitted(&self, addrs: impl IntoIterator<Item = SocketAddr>) -> Result<Vec<SocketAddr>, EgressRefused> {
        let mut ok = Vec::new();
        let mut refused = Vec::new();
        for a in addrs {
            match self.check(a.ip()) {
                Ok(()) => ok.push(a),
                Err(EgressRefused::Address { addr, reason }) => refused.push(format!("{addr} {reason}")),
                Err(e) => return Err(e),
            }
        }
        if !ok.is_empty() {
            Ok(ok)
        } else if refused.is_empty() {
            Err(EgressRefused::NoAddress)
        } else {
            Err(EgressRefused::Resolved(refused.join(", ")))
        }
    }
}

/// Why `addr` is internal (not to be reached by notifications unless allowed), or `None` for
/// a public address. IPv6 forms that carry an IPv4 address (mapped, NAT64, 6to4) are judged by
/// that IPv4 address.
pub fn internal_reason(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => match embedded_ipv4(addr) {
            // `::a.b.c.d`, deprecated since 2006: nothing legitimate uses it.
            Some(_) if v6.segments()[..6] == [0; 6] => Some("IPv4-compatible IPv6, deprecated"),
            Some(v4) => v4_reason(v4),
            None => v6_reason(v6),
        },
    }
}

/// Internal IPv4 ranges, with what they are.
const V4_RANGES: [(&str, &str); 12] = [
    ("0.0.0.0/8", "unspecified / this network"),
    ("10.0.0.0/8", "private, RFC 1918"),
    ("100.64.0.0/10", "carrier-grade NAT, RFC 6598"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local, cloud metadata"),
    ("172.16.0.0/12", "private, RFC 1918"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.168.0.0/16", "private, RFC 1918"),
    ("198.18.0.0/15", "benchmarking, RFC 2544"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
];

/// Internal IPv6 ranges (those carrying IPv4 addresses are handled by [`embedded_ipv4`]).
const V6_RANGES: [(&str, &str); 8] = [
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64, RFC 8215"),
    ("100::/64", "discard-only, RFC 6666"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local, deprecated"),
    ("ff00::/8", "multicast"),
];

fn v4_reason(addr: Ipv4Addr) -> Option<&'static str> {
    V4_RANGES.iter().find_map(|(net, reason)| {
        let net: Ipv4Net = net.parse().expect("a valid IPv4 range");
        net.contains(&addr).then_some(*reason)
    })
}

fn v6_reason(addr: Ipv6Addr) -> Option<&'static str> {
    V6_RANGES.iter().find_map(|(net, reason)| {
        let net: Ipv6Net = net.parse().expect("a valid IPv6 range");
        net.contains(&addr).then_some(*reason)
    })
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`, deprecated), NAT64 (`64:ff9b::a.b.c.d`) and 6to4
/// (`2002:aabb:ccdd::`) all reach that IPv4 address.
fn embedded_ipv4(addr: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = addr else { return None };
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low),
        // `::` and `::1` are IPv6's own unspecified and loopback addresses.
        [0, 0, 0, 0, 0, 0, _, _] if !matches!(s[6..], [0, 0] | [0, 1]) => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, a, b, ..] => Some(Ipv4Addr::new((a >> 8) as u8, a as u8, (b >> 8) as u8, b as u8)),
        _ => None,
    }
}

/// A DNS resolver that returns only the addresses the policy permits: reqwest connects to what
/// it returns, so the check holds at connect time whatever the name resolved to before.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let found = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let permitted = policy.permitted(found)?;
            let addrs: Addrs = Box::new(permitted.into_iter());
            Ok(addrs)
        })
    }
}

/// The HTTP client for notifications: guarded resolver, no redirects, no proxy.
pub fn client(policy: Arc<EgressPolicy>, timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .user_agent(concat!("fleetlens/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver { policy }))
        .build()
        .expect("the notification HTTP client builds (TLS roots are compiled in)")
}

/// Whether `e` is (caused by) the policy's refusal: a permanent failure, not worth retrying.
pub fn is_refusal(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.downcast_ref::<EgressRefused>().is_some() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The error's text with its causes, without the URL (webhook URLs are secrets: Slack's and
/// many others' carry the credential in the path). reqwest names the URL in its own text,
/// which `without_url` drops; anything below that still naming the URL or its path is cut
/// out too.
pub fn error_text(e: reqwest::Error, url: &reqwest::Url) -> String {
    let e = e.without_url();
    let mut out = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    redact_url(&out, url)
}

/// `text` with `url` and its path and query cut out.
pub fn redact_url(text: &str, url: &reqwest::Url) -> String {
    let mut out = text.replace(url.as_str(), "[channel URL]");
    let path_and_query = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    if path_and_query.len() > 1 {
        out = out.replace(&path_and_query, "/[redacted]");
    }
    out
}

/// Parse `--webhook-allow-cidrs`: comma-separated entries, each a CIDR (`10.0.0.0/8`,
/// `fd00::/8`) or a single address; blanks around and between entries are ignored (an empty
/// variable allows nothing).
pub fn parse_cidrs(s: &str) -> Result<AllowCidrs, String> {
    s.split(',').map(str::trim).filter(|e| !e.is_empty()).map(parse_cidr).collect::<Result<_, _>>().map(AllowCidrs)
}

/// The ranges of `--webhook-allow-cidrs` (one flag value holds them all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowCidrs(pub Vec<IpNet>);

/// One `--webhook-allow-cidrs` entry.
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(IpNet::from(ip));
    }
    Err(format!("{s:?} is not a CIDR (like 10.0.0.0/8 or fd00::/8) or an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_public_ones_pass() {
        let policy = EgressPolicy::default();
        for a in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
        ] {
            assert!(policy.check(ip(a)).is_err(), "{a} must be refused");
        }
        for a in ["1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
            assert!(policy.check(ip(a)).is_ok(), "{a} is public");
        }
        let e = policy.check(ip("169.254.169.254")).unwrap_err().to_string();
        assert!(
            e.contains("169.254.169.254") && e.contains("link-local") && e.contains("--webhook-allow-cidrs"),
            "{e}"
        );
    }

    #[test]
    fn the_allow_list_opens_exactly_its_ranges_also_in_ipv6_forms() {
        let policy = EgressPolicy::new(vec![parse_cidr("127.0.0.0/8").unwrap(), parse_cidr("fd00::1").unwrap()]);
        assert!(policy.check(ip("127.0.0.1")).is_ok());
        assert!(policy.check(ip("::ffff:127.0.0.1")).is_ok());
        assert!(policy.check(ip("fd00::1")).is_ok());
        assert!(policy.check(ip("fd00::2")).is_err());
        assert!(policy.check(ip("10.0.0.1")).is_err());
        assert!(policy.check(ip("::1")).is_err(), "IPv6 loopback is not 127.0.0.0/8");
    }

    #[test]
    fn literal_ip_hosts_in_urls_are_checked_in_every_spelling() {
        let policy = EgressPolicy::default();
        for u in [
            "http://127.0.0.1:8080/x",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://[::1]:9/",
            "http://[::ffff:169.254.169.254]/",
            "https://10.0.0.1/hook",
        ] {
            let url = reqwest::Url::parse(u).unwrap();
            assert!(policy.check_url(&url).is_err(), "{u} must be refused");
        }
        for u in ["https://hooks.slack.com/services/x", "http://8.8.8.8/", "http://localhost/"] {
            // Host names are the resolver's to check, at connect time.
            assert!(policy.check_url(&reqwest::Url::parse(u).unwrap()).is_ok(), "{u}");
        }
    }

    #[test]
    fn resolved_lists_keep_only_permitted_addresses() {
        let policy = EgressPolicy::default();
        let sa = |s: &str| SocketAddr::new(ip(s), 443);
        assert_eq!(policy.permitted([sa("10.0.0.1"), sa("1.1.1.1")]).unwrap(), vec![sa("1.1.1.1")]);
        let e = policy.permitted([sa("10.0.0.1"), sa("::1")]).unwrap_err();
        assert!(matches!(e, EgressRefused::Resolved(_)), "{e}");
        assert!(matches!(policy.permitted([]).unwrap_err(), EgressRefused::NoAddress));
    }

    #[test]
    fn cidr_entries_parse_or_say_why_not() {
        assert_eq!(parse_cidr(" 10.1.2.3/8 ").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_cidr("192.168.1.5").unwrap().to_string(), "192.168.1.5/32");
        assert_eq!(parse_cidr("fd00::/8").unwrap().to_string(), "fd00::/8");
        assert!(parse_cidr("10.0.0.0/33").unwrap_err().contains("not a CIDR"));
        assert!(parse_cidr("localhost").is_err());
        assert_eq!(parse_cidrs("").unwrap(), AllowCidrs(vec![]), "an empty variable allows nothing");
        let list = parse_cidrs(" 127.0.0.0/8, ,fd00::/8,").unwrap().0;
        assert_eq!(list.iter().map(ToString::to_string).collect::<Vec<_>>(), ["127.0.0.0/8", "fd00::/8"]);
        let e = parse_cidrs("10.0.0.0/8,intranet").unwrap_err();
        assert!(e.contains("\"intranet\" is not a CIDR"), "{e}");
    }

    #[test]
    fn urls_are_redacted_from_error_text() {
        let url = reqwest::Url::parse("https://hooks.example.com/services/T0/B0/s3cr3t?k=v").unwrap();
        let text = format!("error sending request for url ({url}): /services/T0/B0/s3cr3t?k=v gone");
        let red = redact_url(&text, &url);
        assert!(!red.contains("s3cr3t"), "{red}");
    }
}
