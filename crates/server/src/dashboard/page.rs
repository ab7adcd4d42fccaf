//! The dashboard's HTML: the page itself (`GET /dashboard`) and, when the
//! server has an admin token and the request does not carry it, the login
//! form, whose `POST /dashboard/login` sets the login cookie.
//!
//! Every asset is embedded in the binary (`assets/`): the page needs no
//! network beyond the server it came from, and its Content-Security-Policy
//! forbids anything else.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::extract::{constant_time_eq, cookie_value, has_token, ADMIN_COOKIE};

/// The page's styles, script and markup, put together at compile time.
const STYLE: &str = include_str!("assets/dashboard.css");
const SCRIPT: &str = include_str!("assets/dashboard.js");
const PAGE: &str = include_str!("assets/dashboard.html");
const LOGIN: &str = include_str!("assets/login.html");

/// The longest token the login form accepts, in characters.
pub(crate) const MAX_TOKEN_CHARS: usize = 1024;

/// Inline styles and scripts of our own, no other origin, no framing.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; \
     form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// `GET /dashboard`: the page when the request carries the admin token (or
/// the server has none), otherwise `401` with the login form only.
pub(crate) fn page(token: Option<&str>, headers: &HeaderMap) -> Response {
    if has_token(token, headers) {
        html(StatusCode::OK, &fill(PAGE, ""))
    } else {
        login_form(StatusCode::UNAUTHORIZED, "")
    }
}

/// `POST /dashboard/login` with the form body `token=…`: a `303` to the
/// page with the login cookie when the token is right, `401` with the form
/// again when it is not, `400` when the body is not that form.
pub(crate) fn login(token: Option<&str>, body: &[u8]) -> Result<Response, ApiError> {
    let presented = form_token(body)?;
    let Some(token) = token else {
        return Ok(see_dashboard(None));
    };
    if constant_time_eq(presented.as_bytes(), token.as_bytes()) {
        let cookie = format!(
            "{ADMIN_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            cookie_value(token)
        );
        Ok(see_dashboard(Some(cookie)))
    } else {
        Ok(login_form(
            StatusCode::UNAUTHORIZED,
            "<p class=\"error\" role=\"alert\">That is not the admin token.</p>",
        ))
    }
}

/// The token of a login form body: exactly one field, `token`,
/// URL-encoded.
fn form_token(body: &[u8]) -> Result<String, ApiError> {
    let invalid =
        |why: &str| ApiError::bad_request("invalid_request", format!("login form: {why}"));
    let text = std::str::from_utf8(body).map_err(|_| invalid("the body is not UTF-8"))?;
    let mut token = None;
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = percent_decode(name).ok_or_else(|| invalid("bad percent-encoding"))?;
        if name != "token" {
            return Err(invalid(&format!("unknown field {name:?}; only \"token\"")));
        }
        if token.is_some() {
            return Err(invalid("\"token\" is given twice"));
        }
        let value = percent_decode(value).ok_or_else(|| invalid("bad percent-encoding"))?;
        if value.chars().count() > MAX_TOKEN_CHARS {
            return Err(invalid(&format!(
                "the token is longer than {MAX_TOKEN_CHARS} characters"
            )));
        }
        token = Some(value);
    }
    token.ok_or_else(|| invalid("the field \"token\" is missing"))
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a
/// byte; `None` when an escape is cut short or the bytes are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn see_dashboard(cookie: Option<String>) -> Response {
    let mut response = (StatusCode::SEE_OTHER, [(LOCATION, "/dashboard")]).into_response();
    let headers = response.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(value) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(SET_COOKIE, value);
    }
    response
}

fn login_form(status: StatusCode, message: &str) -> Response {
    html(status, &fill(LOGIN, message))
}

/// `template` with the styles, the script and `message` in their places.
fn fill(template: &str, message: &str) -> String {
    template
        .replace("/*STYLE*/", STYLE)
        .replace("/*SCRIPT*/", SCRIPT)
        .replace("<!--MESSAGE-->", message)
}

fn html(status: StatusCode, body: &str) -> Response {
    let mut response = (status, body.to_owned()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_form_carries_exactly_a_token() {
        assert_eq!(form_token(b"token=s3cret").unwrap(), "s3cret");
        assert_eq!(form_token(b"token=a+b%3Bc").unwrap(), "a b;c");
        assert_eq!(form_token(b"token=").unwrap(), "");
        for bad in [
            &b""[..],
            b"user=x",
            b"token=a&token=b",
            b"token=a&x=1",
            b"token=%zz",
            b"token=%4",
            b"token=%ff",
            b"\xff",
        ] {
            assert!(form_token(bad).is_err(), "{bad:?}");
        }
        let long = format!("token={}", "a".repeat(MAX_TOKEN_CHARS + 1));
        assert!(form_token(long.as_bytes()).is_err());
    }

    #[test]
    fn a_right_token_sets_an_http_only_strict_cookie_and_a_wrong_one_does_not() {
        let ok = login(Some("s3cret"), b"token=s3cret").unwrap();
        assert_eq!(ok.status(), StatusCode::SEE_OTHER);
        assert_eq!(ok.headers()[LOCATION], "/dashboard");
        assert_eq!(
            ok.headers()[SET_COOKIE],
            "tollgate_admin=733363726574; HttpOnly; SameSite=Strict; Path=/"
        );
        let wrong = login(Some("s3cret"), b"token=guess").unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
        assert!(wrong.headers().get(SET_COOKIE).is_none());
        let open = login(None, b"token=anything").unwrap();
        assert_eq!(open.status(), StatusCode::SEE_OTHER);
        assert!(open.headers().get(SET_COOKIE).is_none());
    }
}
