//! The token check in front of the control service's API: every path but the page shell and
//! the OpenAPI document needs `Authorization: Bearer TOKEN` or `?token=TOKEN` (taken out of the
//! query before the handlers see it), compared in constant time.
use std::io::Read;
use std::sync::Arc;

use axum::extract::{Request, State as AxState};
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::api_error::ApiError;

/// Paths anyone may fetch: the page shell and the API's description.
fn is_open(path: &str) -> bool {
    matches!(path, "/" | "/openapi.json")
}

/// Whether `given` is `token`, compared without an early exit, so timing does not tell how
/// much of a guess was right.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// `%XX` and `+` decoded (a query string's value).
fn unescape(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Takes `token=...` out of the request's query (the handlers' parameters do not know it);
/// returns its value.
fn take_query_token(req: &mut Request) -> Option<String> {
    let uri = req.uri();
    let q = uri.query()?;
    let mut token = None;
    let rest: Vec<&str> = q
        .split('&')
        .filter(|kv| match kv.strip_prefix("token=") {
            Some(v) => {
                token = Some(unescape(v));
                false
            }
            None => *kv != "token",
        })
        .collect();
    let token = token?;
    let pq = if rest.is_empty() {
        uri.path().to_string()
    } else {
        format!("{}?{}", uri.path(), rest.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = pq.parse().ok();
    if let Ok(u) = Uri::from_parts(parts) {
        *req.uri_mut() = u;
    }
    Some(token)
}

/// The token check in front of every path but [`is_open`] ones.
pub(super) async fn require_token(
    AxState(token): AxState<Option<Arc<str>>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(token) = token else {
        return next.run(req).await;
    };
    if is_open(req.uri().path()) {
        return next.run(req).await;
    }
    let header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let query = take_query_token(&mut req);
    let ok = match (header, query) {
        (Some(h), _) => same(&h, &token),
        (None, Some(q)) => same(&q, &token),
        (None, None) => false,
    };
    if ok {
        return next.run(req).await;
    }
    let mut r = (
        StatusCode::UNAUTHORIZED,
        Json(ApiError {
            error: "this call needs the service's token (printed by remora daq serve at start): \
                    Authorization: Bearer TOKEN, or ?token=TOKEN"
                .into(),
        }),
    )
        .into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// A fresh token: 128 random bits from the kernel, as 32 hex digits.
pub fn new_token() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_unescaped() {
        assert_eq!(unescape("ab%2Bc+d%zz%4"), "ab+c d%zz%4");
        assert_eq!(unescape("%41%42"), "AB");
    }

    #[test]
    fn the_token_leaves_the_query_and_the_rest_stays() {
        let mut r = Request::builder()
            .uri("/preview/image?scale=log&token=abc%31&bin=2")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(take_query_token(&mut r).as_deref(), Some("abc1"));
        assert_eq!(r.uri().to_string(), "/preview/image?scale=log&bin=2");
        let mut r = Request::builder()
            .uri("/status?token=x")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(take_query_token(&mut r).as_deref(), Some("x"));
        assert_eq!(r.uri().to_string(), "/status");
    }

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(same(&a, &a.clone()) && !same(&a, &b) && !same("", &a));
    }
}
