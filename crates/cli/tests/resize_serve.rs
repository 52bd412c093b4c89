//! `remora resize serve` as imgproxy's users run it (issue 31): configured by imgproxy's
//! environment variables (key, salt, bind, workers, limits; a flag wins over its variable, a bad
//! value stops it naming the variable), and describing itself in an OpenAPI 3 document at
//! `GET /openapi.json` that lists every route it serves and nothing else.

mod resize_common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use remora_resize::service::imgproxy::sign;
use remora_resize::testing::gradient_jpeg;
use resize_common::{exe, request, Server, Tmp};

const KEY: &str = "943b421c9eb07c830af81030552c86009268de4e532ba2ee2eab8247c6da0881";
const SALT: &str = "520f986b998545b4785e0defbc4f3c1203f22de2374a3d53cb7a7fe9fea309c5";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// URL-safe base64 without padding (imgproxy's encoded source form).
fn base64url(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=c.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// `/SIGNATURE/PATH`, signed with `key` and `salt` (hex).
fn signed(path: &str, key: &str, salt: &str) -> String {
    format!("/{}{path}", sign(path, &unhex(key), &unhex(salt)))
}

/// A source folder with a 64×48 photo (3,072 pixels) and a 100×100 one (10,000 pixels).
fn sources(name: &str) -> Tmp {
    let t = Tmp::new(name);
    t.write("photo.jpg", &gradient_jpeg(64, 48, 90));
    t.write("big.jpg", &gradient_jpeg(100, 100, 90));
    t
}

#[test]
fn imgproxy_environment_sets_key_salt_bind_workers_and_limits() {
    let t = sources("env");
    let root = t.0.to_string_lossy().into_owned();
    let env = [
        ("IMGPROXY_KEY", KEY),
        ("IMGPROXY_SALT", SALT),
        ("IMGPROXY_BIND", "127.0.0.1:0"),
        ("IMGPROXY_WORKERS", "1"),
        ("IMGPROXY_LOCAL_FILESYSTEM_ROOT", root.as_str()),
        // 5,000 pixels: the small photo passes, the big one does not.
        ("IMGPROXY_MAX_SRC_RESOLUTION", "0.005"),
    ];
    let srv = Server::start_env(&[], &env);
    assert!(srv.addr.ip().is_loopback(), "{}", srv.addr);
    let path = "/rs:fit:16:16/plain/local:///photo.jpg@jpg";
    let ok = srv.get(&signed(path, KEY, SALT));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.header("content-type").as_deref(), Some("image/jpeg"));
    assert_eq!(ok.header("x-remora-width").as_deref(), Some("16"));
    // A signature made with another key, one character off, or none: refused.
    let mut off = signed(path, KEY, SALT);
    let c = if off.as_bytes()[1] == b'A' { "B" } else { "A" };
    off.replace_range(1..2, c);
    for bad in [signed(path, SALT, KEY), off, format!("/insecure{path}")] {
        let r = srv.get(&bad);
        assert_eq!(r.status, 403, "{bad}: {}", r.text());
    }
    let big = srv.get(&signed(
        "/rs:fit:16:16/plain/local:///big.jpg@jpg",
        KEY,
        SALT,
    ));
    assert_eq!(big.status, 413, "{}", big.text());
    let metrics = srv.get("/metrics").text();
    assert!(
        metrics.lines().any(|l| l == "remora_resize_workers 1"),
        "{metrics}"
    );
}

/// Flags win: the environment's key, bind and workers give way to `--key`, `--salt`,
/// `--listen` and `--workers`, and a variable whose flag is given is not even read (an
/// imgproxy unix-socket bind does not stop a service told where to listen).
#[test]
fn flags_win_over_the_imgproxy_environment() {
    let t = sources("flags");
    let root = t.0.to_string_lossy().into_owned();
    let (key, salt) = ("00ff", "ff00");
    let env = [
        ("IMGPROXY_KEY", KEY),
        ("IMGPROXY_SALT", SALT),
        ("IMGPROXY_BIND", "/run/imgproxy.sock"),
        ("IMGPROXY_WORKERS", "3"),
    ];
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--key",
        key,
        "--salt",
        salt,
        "--workers",
        "2",
        "--root",
        root.as_str(),
    ];
    let srv = Server::start_env(&args, &env);
    let path = "/w:8/plain/local:///photo.jpg@png";
    assert_eq!(srv.get(&signed(path, key, salt)).status, 200);
    assert_eq!(srv.get(&signed(path, KEY, SALT)).status, 403);
    let metrics = srv.get("/metrics").text();
    assert!(
        metrics.lines().any(|l| l == "remora_resize_workers 2"),
        "{metrics}"
    );
}

#[test]
fn a_bad_imgproxy_variable_stops_the_service_naming_it() {
    for (name, value) in [
        ("IMGPROXY_WORKERS", "many"),
        ("IMGPROXY_MAX_SRC_RESOLUTION", "-1"),
        ("IMGPROXY_TIMEOUT", "10s"),
        ("IMGPROXY_KEY", "not hex"),
        ("IMGPROXY_BIND", "/run/imgproxy.sock"),
    ] {
        let mut cmd = Command::new(exe());
        cmd.args(["resize", "serve"]);
        // Without --listen for IMGPROXY_BIND, so that the variable is read.
        if name != "IMGPROXY_BIND" {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if name == "IMGPROXY_KEY" {
            cmd.env("IMGPROXY_SALT", SALT);
        }
        cmd.env(name, value)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}={value}: {err}");
        assert!(err.contains(name), "{name}={value}: {err}");
    }
}

/// The OpenAPI document: version 3, and exactly the routes the service answers, each with its
/// method; every one of them answered 200 here.
#[test]
fn openapi_document_lists_every_route_served() {
    let t = sources("openapi");
    let root = t.0.to_string_lossy().into_owned();
    let srv = Server::start(&["--root", root.as_str()]);
    let r = srv.get("/openapi.json");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    let doc: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3."), "openapi: {version:?}");
    assert!(doc["info"]["title"].as_str().is_some());
    let b64 = base64url(b"local:///photo.jpg");
    let jpeg = gradient_jpeg(64, 48, 90);
    // (method, path in the document, a request the service answers 200)
    let served = [
        ("get", "/health", "/health".to_string()),
        ("get", "/metrics", "/metrics".to_string()),
        ("get", "/openapi.json", "/openapi.json".to_string()),
        ("post", "/resize", "/resize?geometry=10x10".to_string()),
        (
            "get",
            "/{signature}/{processing_options}/plain/{source_url}",
            "/insecure/rs:fit:10:10/q:80/plain/local:///photo.jpg@jpg".to_string(),
        ),
        (
            "get",
            "/{signature}/{processing_options}/{encoded_source_url}",
            format!("/insecure/rs:fit:10:10/q:80/{b64}.png"),
        ),
    ];
    for (method, path, example) in &served {
        let op = &doc["paths"][*path][*method];
        assert!(op.is_object(), "{method} {path} is not in the document");
        assert!(
            op["responses"]["200"].is_object(),
            "{method} {path}: no 200"
        );
        let body: &[u8] = if *method == "post" { &jpeg } else { &[] };
        let reply = request(
            srv.addr,
            &method.to_uppercase(),
            example,
            body,
            Duration::from_secs(30),
        );
        assert_eq!(reply.status, 200, "{method} {example}: {}", reply.text());
    }
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(p, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.clone(), p.clone()))
        })
        .collect();
    let listed: BTreeSet<(String, String)> = served
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(documented, listed, "documented vs served routes");
    // Every path parameter is declared (what a validator checks first).
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for op in ops.as_object().unwrap().values() {
            let declared: BTreeSet<&str> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["in"] == "path")
                        .filter_map(|p| p["name"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            let templated: BTreeSet<&str> = path
                .split('/')
                .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
                .collect();
            assert_eq!(declared, templated, "{path}");
        }
    }
}
