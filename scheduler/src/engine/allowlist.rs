//! Which repositories a task may name (SPEC R4): every repository URL passes this allowlist
//! before its task is stored (a 400 naming the rule) and again before intake runs any git
//! process, for URLs that never passed the API (a pull request's clone URL read from GitHub).
//!
//! The rules (decisions 117 and 118):
//! - `https://` only, unless `repositories.allow_schemes` adds `http`, `ssh` or `git`; git's
//!   `ext::` and `fd::` transports and `file://` never (`file://` is a local path);
//! - local (absolute) paths only with `allow_local_paths`, which `verdict dev` turns on;
//! - no credentials in a URL (an ssh user name is not one);
//! - the host named exactly by `allow_hosts` (the `[github]` host counts, unless
//!   `allow_owners` narrows it to some owners), or `HOST/OWNER` in `allow_owners`, or the whole
//!   URL matching a glob of `allow_patterns`; nothing else;
//! - private-network addresses (loopback, RFC 1918, link-local, unique-local IPv6, CGNAT,
//!   multicast and the like, `localhost`) only when the host is named exactly: a host matched by
//!   a pattern alone is resolved (with a timeout, no connection made) and refused when any of its
//!   addresses is private.
//!
//! URLs are read strictly, so that no URL means one host here and another to git (curl): no
//! whitespace or control characters, no backslash, no `%` in the host or path, no `..` path
//! segment, no query or fragment, and a host that any IPv4 parser could read as a number must be
//! a plain dotted quad. Everything here is pure except [`HostResolver`], which tests replace.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use verdict_backends::BoxFuture;
use verdict_proto::redact::{redact_urls, safe_preview};

/// The longest a host name may take to resolve at submission or intake.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The schemes `allow_schemes` may add to `https`.
pub const EXTRA_SCHEMES: [&str; 3] = ["http", "ssh", "git"];

/// Resolves host names to addresses, without connecting anywhere.
pub trait HostResolver: Send + Sync + std::fmt::Debug {
    /// Every address `host` resolves to; an error in words.
    fn lookup<'a>(&'a self, host: &'a str, port: u16)
    -> BoxFuture<'a, Result<Vec<IpAddr>, String>>;
}

/// The system's resolver (`getaddrinfo`, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl HostResolver for SystemResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
        Box::pin(async move {
            tokio::net::lookup_host((host, port))
                .await
                .map(|addrs| addrs.map(|a| a.ip()).collect())
                .map_err(|e| e.to_string())
        })
    }
}

/// A resolver that answers from a table: tests, and nothing else.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    answers: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    pub fn new() -> StaticResolver {
        StaticResolver::default()
    }

    /// `host` resolves to `addresses` (any other host does not resolve).
    pub fn with(mut self, host: &str, addresses: &[IpAddr]) -> StaticResolver {
        self.answers
            .insert(host.to_ascii_lowercase(), addresses.to_vec());
        self
    }
}

impl HostResolver for StaticResolver {
    fn lookup<'a>(&'a self, host: &'a str, _: u16) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
        Box::pin(async move {
            self.answers
                .get(host)
                .cloned()
                .ok_or_else(|| "no such host".to_owned())
        })
    }
}

/// The allowlist as configured (`[repositories]`), before it is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowlistRules {
    /// Hosts (optionally `host:port`) whose every repository is allowed.
    pub hosts: Vec<String>,
    /// `HOST/OWNER`, or `OWNER` on the code host.
    pub owners: Vec<String>,
    /// Globs over the whole URL (`*` stays within a path segment, `**` crosses them).
    pub patterns: Vec<String>,
    /// Schemes allowed beside `https`: some of [`EXTRA_SCHEMES`].
    pub schemes: Vec<String>,
    /// Absolute local paths (and `file://` URLs); `verdict dev` turns this on.
    pub local_paths: bool,
    /// The `[github]` web host (`host` or `host:port`), when one is configured.
    pub code_host: Option<String>,
}

/// A rule that cannot be used, naming the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct InvalidRule {
    /// `allow_hosts`, `allow_owners`, `allow_patterns` or `allow_schemes`.
    pub setting: &'static str,
    /// The entry as written.
    pub value: String,
    /// What is wrong and how to fix it.
    pub problem: String,
}

/// A repository URL that is not allowed: in words that name the rule and the setting to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("repository `{shown}` is not allowed: {problem}")]
pub struct Refusal {
    /// The URL as given, credentials redacted, shortened.
    pub shown: String,
    pub problem: String,
    /// The host could not be resolved right now: the same request may pass later.
    pub retryable: bool,
}

/// A host and, when named, its port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostRule {
    host: String,
    port: Option<u16>,
}

impl HostRule {
    fn matches(&self, host: &str, port: u16) -> bool {
        self.host == host && self.port.is_none_or(|p| p == port)
    }
}

/// The checked allowlist; cheap to clone.
#[derive(Debug, Clone)]
pub struct RepositoryAllowlist {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    hosts: Vec<HostRule>,
    owners: Vec<(HostRule, String)>,
    patterns: GlobSet,
    schemes: Vec<String>,
    local_paths: bool,
}

impl RepositoryAllowlist {
    /// Checks `rules` once; every entry that cannot be used is an error naming its setting.
    pub fn new(rules: &AllowlistRules) -> Result<RepositoryAllowlist, InvalidRule> {
        let code_host = match &rules.code_host {
            Some(h) => Some(host_rule(h).map_err(|problem| InvalidRule {
                setting: "code_host",
                value: h.clone(),
                problem,
            })?),
            None => None,
        };
        let mut owners = Vec::new();
        for entry in &rules.owners {
            let invalid = |problem: String| InvalidRule {
                setting: "allow_owners",
                value: entry.clone(),
                problem,
            };
            let (host, owner) = match entry.rsplit_once('/') {
                Some((host, owner)) => (host_rule(host).map_err(invalid)?, owner),
                None => match &code_host {
                    Some(host) => (host.clone(), entry.as_str()),
                    None => {
                        return Err(invalid(
                            "names no host, and no [github] is configured; write HOST/OWNER, e.g. \"github.com/acme\"".to_owned(),
                        ));
                    }
                },
            };
            if owner.is_empty() || !owner.chars().all(is_owner_char) {
                return Err(invalid(
                    "has no usable owner; write HOST/OWNER with an organisation or user name, e.g. \"github.com/acme\"".to_owned(),
                ));
            }
            owners.push((host, owner.to_ascii_lowercase()));
        }
        let mut hosts = Vec::new();
        for entry in &rules.hosts {
            hosts.push(host_rule(entry).map_err(|problem| InvalidRule {
                setting: "allow_hosts",
                value: entry.clone(),
                problem,
            })?);
        }
        // The code host is allowed as a whole, unless owners on it say which of it is.
        if let Some(code) = code_host
            && !owners.iter().any(|(h, _)| h.host == code.host)
        {
            hosts.push(code);
        }
        let mut patterns = GlobSetBuilder::new();
        for entry in &rules.patterns {
            patterns.add(pattern(entry).map_err(|problem| InvalidRule {
                setting: "allow_patterns",
                value: entry.clone(),
                problem,
            })?);
        }
        let patterns = patterns.build().map_err(|e| InvalidRule {
            setting: "allow_patterns",
            value: rules.patterns.join(", "),
            problem: format!("cannot be compiled: {e}"),
        })?;
        let mut schemes = Vec::new();
        for scheme in &rules.schemes {
            let lower = scheme.to_ascii_lowercase();
            if !EXTRA_SCHEMES.contains(&lower.as_str()) {
                let why = match lower.as_str() {
                    "https" => "is always allowed; remove it".to_owned(),
                    "file" => "is a local path, which only `verdict dev` reads (repositories.allow_local_paths)".to_owned(),
                    "ext" | "fd" => "makes git run a program or read a file descriptor of the process; it is never allowed".to_owned(),
                    _ => format!("is not a scheme verdict fetches from; use {}", EXTRA_SCHEMES.join(", ")),
                };
                return Err(InvalidRule {
                    setting: "allow_schemes",
                    value: scheme.clone(),
                    problem: why,
                });
            }
            schemes.push(lower);
        }
        Ok(RepositoryAllowlist {
            inner: Arc::new(Inner {
                hosts,
                owners,
                patterns,
                schemes,
                local_paths: rules.local_paths,
            }),
        })
    }

    /// Nothing but `https://` URLs on the given hosts (which must be valid).
    #[cfg(test)]
    pub(crate) fn hosts(hosts: &[&str]) -> RepositoryAllowlist {
        let rules = AllowlistRules {
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            ..AllowlistRules::default()
        };
        RepositoryAllowlist::new(&rules).unwrap_or_else(|_| RepositoryAllowlist::none())
    }

    /// An allowlist that allows nothing.
    pub fn none() -> RepositoryAllowlist {
        RepositoryAllowlist {
            inner: Arc::new(Inner {
                hosts: Vec::new(),
                owners: Vec::new(),
                patterns: GlobSet::empty(),
                schemes: Vec::new(),
                local_paths: false,
            }),
        }
    }

    /// The same rules, with absolute local paths allowed: `verdict dev`'s wiring.
    pub fn with_local_paths(&self) -> RepositoryAllowlist {
        RepositoryAllowlist {
            inner: Arc::new(Inner {
                hosts: self.inner.hosts.clone(),
                owners: self.inner.owners.clone(),
                patterns: self.inner.patterns.clone(),
                schemes: self.inner.schemes.clone(),
                local_paths: true,
            }),
        }
    }

    /// Whether `url` is allowed, resolving its host with `resolver` when only a pattern allows
    /// it (bounded by [`RESOLVE_TIMEOUT`]).
    pub async fn check(&self, url: &str, resolver: &dyn HostResolver) -> Result<(), Refusal> {
        let Admission::Resolve { host, port } = self.check_url(url)? else {
            return Ok(());
        };
        let refuse = |problem: String, retryable: bool| Refusal {
            shown: shown(url),
            problem,
            retryable,
        };
        let addresses =
            match tokio::time::timeout(RESOLVE_TIMEOUT, resolver.lookup(&host, port)).await {
                Err(_) => {
                    return Err(refuse(
                        format!(
                            "its host `{host}` did not resolve within {} s; try again later",
                            RESOLVE_TIMEOUT.as_secs()
                        ),
                        true,
                    ));
                }
                Ok(Err(e)) => {
                    return Err(refuse(
                        format!("its host `{host}` cannot be resolved ({e}); check the URL"),
                        true,
                    ));
                }
                Ok(Ok(addresses)) if addresses.is_empty() => {
                    return Err(refuse(
                        format!("its host `{host}` resolves to no address; check the URL"),
                        true,
                    ));
                }
                Ok(Ok(addresses)) => addresses,
            };
        if let Some(private) = addresses.into_iter().find(|a| is_private(*a)) {
            return Err(refuse(
                format!(
                    "its host `{host}` resolves to the private-network address {private}, and a host matched only by repositories.allow_patterns must be public; name the host exactly in repositories.allow_hosts to trust it"
                ),
                false,
            ));
        }
        Ok(())
    }

    /// What the URL alone decides: refused, allowed, or allowed once its host resolves to public
    /// addresses only.
    pub fn check_url(&self, url: &str) -> Result<Admission, Refusal> {
        let refuse = |problem: String| Refusal {
            shown: shown(url),
            problem,
            retryable: false,
        };
        let parsed = parse(url).map_err(refuse)?;
        let remote = match parsed {
            Parsed::Local => {
                return if self.inner.local_paths {
                    Ok(Admission::Allowed)
                } else {
                    Err(refuse("local paths and file:// URLs are read only by `verdict dev` (repositories.allow_local_paths); give an https:// URL".to_owned()))
                };
            }
            Parsed::Remote(remote) => remote,
        };
        if remote.scheme != "https" && !self.inner.schemes.contains(&remote.scheme) {
            return Err(refuse(format!(
                "the scheme {}:// is not allowed; use https://, or add \"{}\" to repositories.allow_schemes",
                remote.scheme, remote.scheme
            )));
        }
        let inner = &self.inner;
        let named = inner
            .hosts
            .iter()
            .any(|h| h.matches(&remote.host, remote.port))
            || inner.owners.iter().any(|(h, owner)| {
                h.matches(&remote.host, remote.port)
                    && remote
                        .owner()
                        .is_some_and(|o| o.eq_ignore_ascii_case(owner))
            });
        if named {
            // Naming a host exactly is trusting it, private addresses included (an internal
            // GitHub Enterprise, say).
            return Ok(Admission::Allowed);
        }
        if !inner.patterns.is_match(remote.normalised()) {
            return Err(refuse(format!(
                "its host `{}` is not an allowed repository source; add it to repositories.allow_hosts, HOST/OWNER to repositories.allow_owners, or a matching glob to repositories.allow_patterns",
                remote.host
            )));
        }
        match remote.address {
            Some(ip) if is_private(ip) => Err(refuse(format!(
                "{ip} is a private-network address, and a host matched only by repositories.allow_patterns must be public; name it exactly in repositories.allow_hosts to trust it"
            ))),
            Some(_) => Ok(Admission::Allowed),
            None if is_localhost(&remote.host) => Err(refuse(format!(
                "`{}` is this machine, and a host matched only by repositories.allow_patterns must be public; name it exactly in repositories.allow_hosts to trust it",
                remote.host
            ))),
            None => Ok(Admission::Resolve {
                host: remote.host,
                port: remote.port,
            }),
        }
    }
}

/// What [`RepositoryAllowlist::check_url`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Allowed,
    /// Allowed once `host` resolves to public addresses only.
    Resolve {
        host: String,
        port: u16,
    },
}

/// A repository URL, read strictly.
#[derive(Debug)]
enum Parsed {
    /// An absolute path or a `file://` URL.
    Local,
    Remote(Remote),
}

#[derive(Debug)]
struct Remote {
    /// Lowercase; `ssh` for scp-like `user@host:path` remotes.
    scheme: String,
    /// Lowercase, no trailing dot; an IPv6 address without brackets.
    host: String,
    port: u16,
    /// The host as an address, when it is one.
    address: Option<IpAddr>,
    /// From the first `/` (added for scp-like remotes).
    path: String,
}

impl Remote {
    /// The first path segment: an owner on code hosts.
    fn owner(&self) -> Option<&str> {
        self.path
            .trim_start_matches('/')
            .split('/')
            .next()
            .filter(|s| !s.is_empty())
    }

    /// What patterns are matched against: `scheme://host[:port]/path`, the port only when it
    /// is not the scheme's default.
    fn normalised(&self) -> String {
        let host = match self.address {
            Some(IpAddr::V6(_)) => format!("[{}]", self.host),
            _ => self.host.clone(),
        };
        let authority = if default_port(&self.scheme) == Some(self.port) {
            host
        } else {
            format!("{host}:{}", self.port)
        };
        format!("{}://{authority}{}", self.scheme, self.path)
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "https" => Some(443),
        "http" => Some(80),
        "ssh" => Some(22),
        "git" => Some(9418),
        _ => None,
    }
}

/// The URL as shown in refusals: credentials redacted, one line, bounded.
fn shown(url: &str) -> String {
    safe_preview(&redact_urls(url), 200)
}

fn parse(url: &str) -> Result<Parsed, String> {
    if url.trim().is_empty() {
        return Err("it is empty; give an https:// URL".to_owned());
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains whitespace or control characters".to_owned());
    }
    if url.contains('\\') {
        return Err("it contains a backslash, which URL parsers read differently".to_owned());
    }
    if url.starts_with('/') {
        return Ok(Parsed::Local);
    }
    if let Some((transport, _)) = url.split_once("::")
        && !transport.contains('/')
    {
        return Err(format!(
            "git's `{transport}::` transport runs a helper program (ext::) or reads from the process (fd::); it is never allowed"
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return scp_like(url);
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme == "file" {
        return Ok(Parsed::Local);
    }
    if default_port(&scheme).is_none() {
        return Err(format!(
            "the scheme {scheme}:// is not one verdict fetches from; use https://"
        ));
    }
    if rest.contains(['?', '#']) {
        return Err("it has a query or fragment, which a repository URL never needs".to_owned());
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let hostport = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => {
            if scheme != "ssh" || userinfo.contains(':') || userinfo.is_empty() {
                return Err("it carries credentials; give credentials to verdict instead ([github] for GitHub), never in the URL".to_owned());
            }
            hostport
        }
        None => authority,
    };
    let (host, port) = split_port(hostport)?;
    let port = match port {
        Some(p) => p,
        None => default_port(&scheme).unwrap_or(443),
    };
    let (host, address) = host_name(host)?;
    check_path(path)?;
    Ok(Parsed::Remote(Remote {
        scheme,
        host,
        port,
        address,
        path: path.to_owned(),
    }))
}

/// `[user@]host:path`, git's scp-like ssh syntax; anything else without a scheme is a relative
/// path.
fn scp_like(url: &str) -> Result<Parsed, String> {
    let colon = url.find(':');
    let slash = url.find('/');
    let Some(colon) = colon.filter(|c| slash.is_none_or(|s| *c < s)) else {
        return Err(
            "it is neither an https:// URL nor an absolute path; give an https:// URL".to_owned(),
        );
    };
    let (authority, path) = (&url[..colon], &url[colon + 1..]);
    let host = match authority.rsplit_once('@') {
        Some((user, host)) if !user.is_empty() && !user.contains(':') => host,
        Some(_) => return Err("it carries credentials; never put them in the URL".to_owned()),
        None => authority,
    };
    if host.starts_with('[') {
        return Err("write an IPv6 ssh remote as ssh://[address]/path".to_owned());
    }
    let (host, address) = host_name(host)?;
    let path = format!("/{}", path.trim_start_matches('/'));
    check_path(&path)?;
    Ok(Parsed::Remote(Remote {
        scheme: "ssh".to_owned(),
        host,
        port: 22,
        address,
        path,
    }))
}

/// `host[:port]`, `[v6][:port]`.
fn split_port(hostport: &str) -> Result<(&str, Option<u16>), String> {
    let bad_port = || "its port is not a number from 1 to 65535".to_owned();
    if let Some(rest) = hostport.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return Err("its IPv6 address has no closing `]`".to_owned());
        };
        let port = match after.strip_prefix(':') {
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(bad_port)?,
            ),
            None if after.is_empty() => None,
            None => return Err("it has text after the IPv6 address".to_owned()),
        };
        return Ok((v6, port));
    }
    match hostport.rsplit_once(':') {
        Some((host, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(bad_port)?;
            Ok((host, Some(port)))
        }
        None => Ok((hostport, None)),
    }
}

/// The host lowercased, and its address when it is one. Anything an IPv4 parser could read as a
/// number (`2130706433`, `0x7f.1`, `127.1`, `0177.0.0.1`) must be written as a plain dotted
/// quad, because curl reads those forms as addresses.
fn host_name(host: &str) -> Result<(String, Option<IpAddr>), String> {
    if host.contains('%') {
        return Err("its host is percent-encoded or carries an IPv6 zone".to_owned());
    }
    if let Ok(v6) = host.parse::<Ipv6Addr>() {
        return Ok((v6.to_string(), Some(IpAddr::V6(v6))));
    }
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if host.is_empty() {
        return Err("it names no host".to_owned());
    }
    if numeric_ipv4(&host) {
        return match host.parse::<Ipv4Addr>() {
            // std accepts only the plain dotted quad.
            Ok(v4) if v4.to_string() == host => Ok((host, Some(IpAddr::V4(v4)))),
            _ => Err(format!(
                "its host `{host}` reads as an IPv4 address in a form parsers disagree on; write the address as four decimal numbers (a.b.c.d)"
            )),
        };
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!(
            "its host `{}` is not a host name (ASCII letters, digits, `-`, `_` and dots)",
            safe_preview(&host, 80)
        ));
    }
    Ok((host, None))
}

/// Whether `host` is 1–4 dot-separated numbers in decimal, octal (leading 0) or hex (`0x`), as
/// `inet_aton` and curl read them.
fn numeric_ipv4(host: &str) -> bool {
    let parts: Vec<&str> = host.split('.').collect();
    parts.len() <= 4
        && parts.iter().all(|p| {
            let hex = p.strip_prefix("0x");
            match hex {
                Some(h) => h.chars().all(|c| c.is_ascii_hexdigit()),
                None => !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()),
            }
        })
}

fn check_path(path: &str) -> Result<(), String> {
    if path.contains('%') {
        return Err("its path is percent-encoded; write it plainly".to_owned());
    }
    if path.split('/').any(|s| s == "..") {
        return Err("its path has a `..` segment".to_owned());
    }
    Ok(())
}

fn is_owner_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// A `host` or `host:port` entry, lowercased.
fn host_rule(entry: &str) -> Result<HostRule, String> {
    let hint = "write a host name or address as it appears in URLs, optionally with :port, e.g. \"github.com\" or \"git.example.com:8443\"";
    if entry.contains("://") || entry.contains('/') || entry.contains('@') {
        return Err(format!("is not a host; {hint}"));
    }
    let (host, port) = split_port(entry).map_err(|e| format!("{e}; {hint}"))?;
    let (host, _) = host_name(host).map_err(|e| format!("{e}; {hint}"))?;
    Ok(HostRule { host, port })
}

fn pattern(entry: &str) -> Result<Glob, String> {
    let Some((scheme, rest)) = entry.split_once("://") else {
        return Err("does not start with a scheme; write a glob over the whole URL, e.g. \"https://git.example.com/team-*/**\"".to_owned());
    };
    if rest.is_empty() {
        return Err("has nothing after the scheme; write a glob over the whole URL, e.g. \"https://git.example.com/team-*/**\"".to_owned());
    }
    let lowered = format!("{}://{rest}", scheme.to_ascii_lowercase());
    GlobBuilder::new(&lowered)
        .literal_separator(true)
        .build()
        .map_err(|e| format!("is not a glob: {e}"))
}

/// Loopback, private (RFC 1918), link-local, CGNAT, unique-local and site-local IPv6,
/// multicast, broadcast, unspecified, reserved and documentation addresses, and IPv6 forms that
/// embed such an IPv4 address (mapped, compatible, NAT64, 6to4).
pub fn is_private(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => private_v6(v6),
    }
}

fn private_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_private()
        || v4.is_loopback()
        || v4.is_link_local()
        || v4.is_multicast()
        || v4.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 240
}

fn private_v6(v6: Ipv6Addr) -> bool {
    let s = v6.segments();
    let embedded = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        private_v4(Ipv4Addr::new(a, b, c, d))
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return private_v4(v4);
    }
    v6.is_unspecified()
        || v6.is_loopback()
        || v6.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        || (s[0] == 0x2001 && s[1] == 0x0db8)
        // IPv4-compatible (deprecated) ::a.b.c.d
        || (s[..6].iter().all(|x| *x == 0) && embedded(s[6], s[7]))
        // NAT64 64:ff9b::a.b.c.d
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) && embedded(s[6], s[7]))
        // 6to4 2002:AABB:CCDD::
        || (s[0] == 0x2002 && embedded(s[1], s[2]))
}

/// `localhost` and the names under it (RFC 6761).
fn is_localhost(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn rules() -> AllowlistRules {
        AllowlistRules {
            hosts: vec!["git.example.com".to_owned(), "10.1.2.3".to_owned()],
            owners: vec!["acme".to_owned(), "gitlab.com/team".to_owned()],
            patterns: vec!["https://*.forge.example/**".to_owned()],
            schemes: Vec::new(),
            local_paths: false,
            code_host: Some("github.com".to_owned()),
        }
    }

    fn allowlist() -> RepositoryAllowlist {
        RepositoryAllowlist::new(&rules()).unwrap()
    }

    fn refusal(list: &RepositoryAllowlist, url: &str) -> String {
        match list.check_url(url) {
            Err(r) => r.to_string(),
            Ok(a) => panic!("{url} was allowed: {a:?}"),
        }
    }

    /// A resolver that must never be asked.
    #[derive(Debug)]
    struct Unasked;

    impl HostResolver for Unasked {
        fn lookup<'a>(
            &'a self,
            host: &'a str,
            _: u16,
        ) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
            panic!("{host} was resolved")
        }
    }

    /// A resolver that never answers.
    #[derive(Debug)]
    struct Silent;

    impl HostResolver for Silent {
        fn lookup<'a>(&'a self, _: &'a str, _: u16) -> BoxFuture<'a, Result<Vec<IpAddr>, String>> {
            Box::pin(std::future::pending())
        }
    }

    #[test]
    fn named_hosts_and_owners_are_allowed_without_resolving() {
        let list = allowlist();
        for url in [
            "https://git.example.com/any/repo.git",
            "https://GIT.example.com./any/repo",
            "https://git.example.com:8443/x.git",
            "https://10.1.2.3/internal.git",
            "https://gitlab.com/team/tool.git",
            "https://gitlab.com/Team/tool.git",
            // Owners on the code host narrow it: only acme there.
            "https://github.com/acme/shop.git",
        ] {
            assert_eq!(list.check_url(url), Ok(Admission::Allowed), "{url}");
        }
        for url in [
            "https://github.com/someone-else/repo.git",
            "https://gitlab.com/other/tool.git",
            "https://example.com/r.git",
        ] {
            assert!(
                refusal(&list, url).contains(
                    "is not an allowed repository source; add it to repositories.allow_hosts"
                ),
                "{url}"
            );
        }
    }

    #[test]
    fn the_code_host_is_allowed_as_a_whole_unless_owners_narrow_it() {
        let list = RepositoryAllowlist::new(&AllowlistRules {
            code_host: Some("ghe.example.com:8443".to_owned()),
            ..AllowlistRules::default()
        })
        .unwrap();
        assert_eq!(
            list.check_url("https://ghe.example.com:8443/anyone/x.git"),
            Ok(Admission::Allowed)
        );
        assert!(
            list.check_url("https://ghe.example.com/anyone/x.git")
                .is_err()
        );
        assert!(
            refusal(&RepositoryAllowlist::none(), "https://github.com/a/b.git")
                .contains("repositories.allow_hosts"),
            "nothing configured allows nothing"
        );
    }

    #[test]
    fn schemes_other_than_https_need_allowing_and_some_never_are() {
        let list = allowlist();
        for (url, says) in [
            (
                "http://git.example.com/r.git",
                "add \"http\" to repositories.allow_schemes",
            ),
            (
                "ssh://git@git.example.com/r.git",
                "add \"ssh\" to repositories.allow_schemes",
            ),
            (
                "git@git.example.com:acme/r.git",
                "add \"ssh\" to repositories.allow_schemes",
            ),
            (
                "git://git.example.com/r.git",
                "add \"git\" to repositories.allow_schemes",
            ),
            ("ext::sh", "never allowed"),
            ("ext::git-remote-http", "never allowed"),
            ("fd::17", "never allowed"),
            (
                "ftp://git.example.com/r.git",
                "not one verdict fetches from",
            ),
            ("file:///srv/repo.git", "only by `verdict dev`"),
            ("/srv/repo", "only by `verdict dev`"),
            ("../repo", "neither an https:// URL nor an absolute path"),
            ("repo", "neither an https:// URL nor an absolute path"),
        ] {
            let message = refusal(&list, url);
            assert!(message.contains(says), "{url}: {message}");
        }
        let ssh = RepositoryAllowlist::new(&AllowlistRules {
            schemes: vec!["ssh".to_owned(), "HTTP".to_owned()],
            ..rules()
        })
        .unwrap();
        for url in [
            "ssh://git@git.example.com/r.git",
            "git@git.example.com:any/r.git",
            "git.example.com:any/r.git",
            "http://git.example.com/r.git",
        ] {
            assert_eq!(ssh.check_url(url), Ok(Admission::Allowed), "{url}");
        }
    }

    #[test]
    fn local_paths_only_when_allowed() {
        let dev = allowlist().with_local_paths();
        for url in ["/srv/repo", "file:///srv/repo.git"] {
            assert_eq!(dev.check_url(url), Ok(Admission::Allowed), "{url}");
        }
        assert!(refusal(&dev, "relative/repo").contains("absolute path"));
    }

    #[test]
    fn credentials_and_ambiguous_urls_are_refused() {
        let list = allowlist();
        for (url, says) in [
            (
                "https://x-access-token:ghs_secret@git.example.com/r.git",
                "carries credentials",
            ),
            (
                "https://ghp_token@git.example.com/r.git",
                "carries credentials",
            ),
            ("https://git.example.com\\@evil.example/r.git", "backslash"),
            ("https://git.example.com/r.git?x=1", "query or fragment"),
            ("https://git.example.com/r.git#main", "query or fragment"),
            ("https://git.example.com/a/../b.git", "`..` segment"),
            ("https://git.example.com/%2e%2e/b.git", "percent-encoded"),
            ("https://git%2eexample.com/r.git", "percent-encoded"),
            ("https://git.example.com /r.git", "whitespace"),
            ("https://git.example.com:0/r.git", "port"),
            ("https://git.example.com:99999/r.git", "port"),
            ("https:///r.git", "names no host"),
            ("", "empty"),
        ] {
            let message = refusal(&list, url);
            assert!(message.contains(says), "{url}: {message}");
            assert!(
                !message.contains("secret") && !message.contains("ghp_token"),
                "{message}"
            );
        }
    }

    #[test]
    fn private_addresses_are_refused_unless_named_exactly() {
        // Any host at all, as long as it is public: the "any https host" an operator may opt in
        // to, with 127.0.0.1 trusted by name.
        let open = RepositoryAllowlist::new(&AllowlistRules {
            patterns: vec!["https://*/**".to_owned()],
            hosts: vec!["127.0.0.1".to_owned()],
            ..AllowlistRules::default()
        })
        .unwrap();
        for url in [
            "https://10.0.0.1/r.git",
            "https://169.254.169.254/latest/meta-data",
            "https://192.168.1.1/r.git",
            "https://172.16.0.1/r.git",
            "https://100.64.0.1/r.git",
            "https://0.0.0.0/r.git",
            "https://localhost/r.git",
            "https://api.localhost/r.git",
            "https://[::1]/r.git",
            "https://[fd00::1]/r.git",
            "https://[fe80::1]/r.git",
            "https://[::ffff:10.0.0.1]/r.git",
            "https://[64:ff9b::a00:1]/r.git",
            "https://[2002:a00:1::]/r.git",
        ] {
            let message = refusal(&open, url);
            assert!(
                message.contains("must be public; name it exactly in repositories.allow_hosts"),
                "{url}: {message}"
            );
        }
        // Forms curl reads as 127.0.0.1 or 10.0.0.1, which a pattern could not see through.
        for url in [
            "https://2130706433/r.git",
            "https://0x7f.1/r.git",
            "https://127.1/r.git",
            "https://0177.0.0.1/r.git",
            "https://012.0.0.1/r.git",
        ] {
            let message = refusal(&open, url);
            assert!(message.contains("four decimal numbers"), "{url}: {message}");
        }
        assert_eq!(
            open.check_url("https://127.0.0.1:9418/r.git"),
            Ok(Admission::Allowed),
            "named exactly, any port"
        );
        assert_eq!(
            open.check_url("https://93.184.216.34/r.git"),
            Ok(Admission::Allowed)
        );
        assert_eq!(
            open.check_url("https://git.a.example/o/r.git"),
            Ok(Admission::Resolve {
                host: "git.a.example".to_owned(),
                port: 443
            })
        );
        assert!(
            refusal(&RepositoryAllowlist::none(), "https://93.184.216.34/r.git")
                .contains("not an allowed")
        );
    }

    #[tokio::test]
    async fn a_host_matched_by_a_pattern_must_resolve_to_public_addresses() {
        let list = RepositoryAllowlist::new(&AllowlistRules {
            patterns: vec!["https://*.forge.example/**".to_owned()],
            hosts: vec!["git.example.com".to_owned()],
            ..AllowlistRules::default()
        })
        .unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let private: IpAddr = "10.0.0.7".parse().unwrap();
        let loopback6: IpAddr = "::1".parse().unwrap();
        let resolver = StaticResolver::new()
            .with("a.forge.example", &[public])
            .with("b.forge.example", &[public, private])
            .with("c.forge.example", &[loopback6]);

        assert_eq!(
            list.check("https://a.forge.example/x/y.git", &resolver)
                .await,
            Ok(())
        );
        for host in ["b", "c"] {
            let refused = list
                .check(&format!("https://{host}.forge.example/x.git"), &resolver)
                .await
                .unwrap_err();
            assert!(
                refused
                    .problem
                    .contains("resolves to the private-network address"),
                "{refused}"
            );
            assert!(!refused.retryable);
        }
        let unknown = list
            .check("https://d.forge.example/x.git", &resolver)
            .await
            .unwrap_err();
        assert!(unknown.problem.contains("cannot be resolved"), "{unknown}");
        assert!(unknown.retryable);
        // Named exactly: never resolved.
        assert_eq!(
            list.check("https://git.example.com/x.git", &Unasked).await,
            Ok(())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_resolver_that_does_not_answer_is_given_up_after_the_timeout() {
        let list = RepositoryAllowlist::new(&AllowlistRules {
            patterns: vec!["https://*.forge.example/**".to_owned()],
            ..AllowlistRules::default()
        })
        .unwrap();
        let start = tokio::time::Instant::now();
        let refused = list
            .check("https://a.forge.example/x.git", &Silent)
            .await
            .unwrap_err();
        assert_eq!(start.elapsed(), RESOLVE_TIMEOUT);
        assert!(refused.retryable);
        assert!(
            refused.problem.contains("did not resolve within 5 s"),
            "{refused}"
        );
    }

    #[test]
    fn rules_that_cannot_be_used_name_their_setting() {
        let invalid = |rules: AllowlistRules| RepositoryAllowlist::new(&rules).unwrap_err();
        let e = invalid(AllowlistRules {
            hosts: vec!["https://github.com".to_owned()],
            ..AllowlistRules::default()
        });
        assert_eq!(e.setting, "allow_hosts");
        assert!(e.problem.contains("is not a host"), "{e}");
        let e = invalid(AllowlistRules {
            owners: vec!["acme".to_owned()],
            ..AllowlistRules::default()
        });
        assert_eq!(e.setting, "allow_owners");
        assert!(e.problem.contains("HOST/OWNER"), "{e}");
        for scheme in ["ext", "fd", "file", "https", "gopher"] {
            let e = invalid(AllowlistRules {
                schemes: vec![scheme.to_owned()],
                ..AllowlistRules::default()
            });
            assert_eq!(e.setting, "allow_schemes", "{scheme}");
        }
        let e = invalid(AllowlistRules {
            patterns: vec!["github.com/acme/*".to_owned()],
            ..AllowlistRules::default()
        });
        assert_eq!(e.setting, "allow_patterns");
    }

    #[test]
    fn private_ranges() {
        for private in [
            "127.0.0.1",
            "10.255.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "169.254.1.1",
            "100.127.0.1",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "fc00::1",
            "fdff::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2001:db8::1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in [
            "93.184.216.34",
            "140.82.112.3",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:140.82.112.3",
            "2002:8c52:7003::",
        ] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }
}
