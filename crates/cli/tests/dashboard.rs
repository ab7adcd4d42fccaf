//! The dashboard (`GET /dashboard`) of `tollgate serve`, end to end: the
//! real binary with a rules file, traffic that makes one key the top
//! offender, and the page rendered by headless Chromium (Debian's
//! `chromium`, which `scripts/test` installs): its DOM after the page's
//! scripts ran (`--dump-dom` with a virtual-time budget) shows the rules,
//! non-zero rates, the hammered key first among the offenders and the
//! "why was this refused?" box's answer for it. With an admin token, the
//! page without the login cookie shows only the login form, and the JSON
//! routes take the cookie or the bearer token and nothing else.
//!
//! Every wait is bounded (a browser that does not finish within
//! [`BROWSER_PATIENCE`] is killed and the test fails saying so).
//! `TOLLGATE_UPDATE_SCREENSHOT=1` also writes the page's screenshot to
//! docs/dashboard.png.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::Server;

/// How long one Chromium run may take on a busy two-core machine.
const BROWSER_PATIENCE: Duration = Duration::from_secs(180);

/// 10 an hour with a burst of 10: a refused key stays refused for minutes,
/// whatever the time the browser takes to start.
const RULES: &str = "\
domain: api
descriptors:
  - key: user
    rate_limit:
      name: per-user
      algorithm: token_bucket
      unit: hour
      requests_per_unit: 10
      burst: 10
";

/// Debian's Chromium, or a failure naming what to install.
fn chromium() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("chromium"))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "the dashboard test needs Chromium: `apt-get install chromium` \
             (scripts/test installs it when missing)"
        )
    })
}

/// Runs headless Chromium on `url` with `extra` arguments, within
/// [`BROWSER_PATIENCE`], and returns its output.
fn browse(url: &str, extra: &[&str]) -> Output {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let started = Instant::now();
    // Chromium writes little; reading its pipes after it exits cannot
    // block it. Polled, so that a browser that hangs is killed.
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > BROWSER_PATIENCE {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "chromium did not finish with {url} within {BROWSER_PATIENCE:?}; stderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "chromium failed on {url}: {:?}; stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The page's DOM once its scripts ran.
fn dump_dom(url: &str) -> String {
    String::from_utf8(browse(url, &["--dump-dom"]).stdout).unwrap()
}

/// The value of attribute `name` of the first element at or after `from`
/// in `dom` that has it.
fn attribute<'a>(dom: &'a str, from: usize, name: &str) -> Option<&'a str> {
    let marker = format!(" {name}=\"");
    let start = dom[from..].find(&marker)? + from + marker.len();
    let end = dom[start..].find('"')? + start;
    Some(&dom[start..end])
}

/// Where `needle` first appears in `dom`, or a failure showing the DOM.
fn position(dom: &str, needle: &str) -> usize {
    dom.find(needle)
        .unwrap_or_else(|| panic!("the page does not show {needle:?}:\n{dom}"))
}

fn rules_check(server: &Server, user: &str) -> u16 {
    let body = json!({
        "domain": "api",
        "descriptors": [{"entries": [{"key": "user", "value": user}]}],
    });
    server.call("/v1/check", &body).0
}

fn start(rules: &Path, extra: &[&str]) -> Server {
    let mut args = vec!["--rules", rules.to_str().unwrap()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn the_page_shows_rules_rates_offenders_and_why_a_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    support::write(&rules, RULES);
    let server = start(&rules, &[]);
    // mallory is refused 20 times, eve twice, alice never.
    for (user, requests) in [("mallory", 30), ("eve", 12), ("alice", 3)] {
        for _ in 0..requests {
            rules_check(&server, user);
        }
    }
    let url = format!(
        "{}/dashboard#peek&domain=api&descriptors=user%3Dmallory",
        server.base
    );
    let dom = dump_dom(&url);

    // The rule, its limit in words, its rates.
    let row = position(&dom, "<tr data-rule=\"api.user\"");
    assert!(dom.contains("10 burst, 10/h, token bucket"), "{dom}");
    let allowed: f64 = attribute(
        &dom,
        position(&dom[row..], "num allowed") + row,
        "data-rate",
    )
    .unwrap()
    .parse()
    .unwrap();
    let refused: f64 = attribute(
        &dom,
        position(&dom[row..], "num rejected") + row,
        "data-rate",
    )
    .unwrap()
    .parse()
    .unwrap();
    assert!(
        allowed > 0.0 && refused > 0.0,
        "allowed {allowed}/s, refused {refused}/s"
    );

    // mallory first among the offenders.
    let offenders = position(&dom, "<ol class=\"offenders\" data-rule=\"api.user\"");
    let first = attribute(&dom, offenders, "data-key").unwrap();
    assert!(first.contains("mallory"), "first offender {first}:\n{dom}");
    let eve = position(&dom, "eve");
    assert!(dom[offenders..].find("mallory").unwrap() + offenders < eve);

    // The peek box, filled from the fragment, answered: no token left, a
    // wait of minutes.
    let result = position(&dom, "id=\"peek-result\"");
    let peeked = position(&dom[result..], "<tr data-rule=\"api.user\"") + result;
    assert_eq!(
        attribute(&dom, peeked, "data-remaining"),
        Some("0"),
        "{dom}"
    );
    let wait: u64 = attribute(&dom, peeked, "data-retry-after-ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait > 60_000, "mallory waits {wait} ms");
    assert!(dom[result..].contains("would be refused now"), "{dom}");
    // For people: "0 of 10", a wait in minutes and seconds.
    let row_end = dom[peeked..].find("</tr>").unwrap() + peeked;
    let shown = &dom[peeked..row_end];
    assert!(shown.contains("0 of 10"), "{shown}");
    assert!(
        shown.contains("wait 5 min") || shown.contains("wait 6 min"),
        "{shown}"
    );

    // The peek counted nothing.
    assert_eq!(
        server.metric("tollgate_requests_total{domain=\"api\",rule=\"api.user\"}"),
        45.0
    );

    // A screenshot: a PNG, and docs/dashboard.png when asked.
    let shot = dir.path().join("dashboard.png");
    browse(
        &url,
        &[
            "--window-size=1100,1000",
            "--force-device-scale-factor=1",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let png = std::fs::read(&shot).expect("chromium wrote no screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    if std::env::var_os("TOLLGATE_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard.png");
        std::fs::write(docs, png).unwrap();
    }
}

#[test]
fn with_a_token_the_page_shows_only_the_login_form_until_the_cookie_comes() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    support::write(&rules, RULES);
    let server = start(&rules, &["--admin-token", "s3 cret"]);
    for _ in 0..12 {
        rules_check(&server, "mallory");
    }

    let dom = dump_dom(&format!("{}/dashboard", server.base));
    assert!(dom.contains("<form id=\"login\""), "{dom}");
    assert!(!dom.contains("id=\"rules\""), "{dom}");
    assert!(!dom.contains("api.user"), "{dom}");

    // No redirects followed: the login's answer is looked at itself.
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(support::PATIENCE)
        .build()
        .unwrap();
    let get = |path: &str, header: Option<(&str, &str)>| {
        let mut request = client.get(format!("{}{path}", server.base));
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        request.send().unwrap()
    };
    // As a browser sends the form: a space as `+`.
    let login = |token: &str| {
        client
            .post(format!("{}/dashboard/login", server.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={}", token.replace(' ', "+")))
            .send()
            .unwrap()
    };
    for path in ["/v1/dashboard", "/v1/top?domain=api&rule=api.user"] {
        assert_eq!(get(path, None).status(), 401, "{path}");
        assert_eq!(
            get(path, Some(("authorization", "Bearer s3 cret"))).status(),
            200,
            "{path}"
        );
    }
    let wrong = login("guess");
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());
    assert!(wrong.text().unwrap().contains("<form id=\"login\""));

    let signed_in = login("s3 cret");
    assert_eq!(signed_in.status(), 303);
    assert_eq!(signed_in.headers()["location"], "/dashboard");
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("s3 cret") && !cookie.contains("s3%20cret"));
    let pair = cookie.split(';').next().unwrap();

    let page = get("/dashboard", Some(("cookie", pair)));
    assert_eq!(page.status(), 200);
    assert!(page.text().unwrap().contains("id=\"rules\""));
    let data = get("/v1/dashboard", Some(("cookie", pair)));
    assert_eq!(data.status(), 200);
    let data: Value = data.json().unwrap();
    let rule = data["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "api.user")
        .unwrap_or_else(|| panic!("{data}"));
    assert_eq!(rule["counts"]["allowed"], 10, "{data}");
    assert_eq!(rule["counts"]["rejected"], 2, "{data}");
    let top = get("/v1/top?domain=api&rule=api.user", Some(("cookie", pair)));
    assert_eq!(top.status(), 200);
    let peek = client
        .post(format!("{}/v1/dashboard/peek", server.base))
        .header("cookie", pair)
        .json(&json!({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "mallory"}]}]}))
        .send()
        .unwrap();
    assert_eq!(peek.status(), 200);
    let peek: Value = peek.json().unwrap();
    assert_eq!(peek["allowed"], false, "{peek}");
    assert_eq!(peek["limits"][0]["remaining"], 0, "{peek}");
    let forged = get("/v1/dashboard", Some(("cookie", "tollgate_admin=00")));
    assert_eq!(forged.status(), 401);
}
