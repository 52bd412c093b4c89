//! The service's OpenAPI 3 document, served at `GET /openapi.json`: built by utoipa from the
//! handlers' annotations (in `routes`), as `remora daq serve` builds its own.
//!
//! One handler serves both imgproxy URL forms (the router cannot tell them apart before
//! parsing); the document lists each form as its own path, the `plain` one through
//! [`imgproxy_plain`], which exists only to be documented. An imgproxy path's
//! `processing_options` stand for one or more `/`-separated options, which an OpenAPI path
//! parameter cannot express: the parameter's description says so.

use axum::Json;
use utoipa::OpenApi;

use super::routes::{
    __path_get_imgproxy, __path_health, __path_metrics, __path_post_resize, Image,
};

/// imgproxy's `plain` URL form; served by the same handler as the base64 form.
#[utoipa::path(get, path = "/{signature}/{processing_options}/plain/{source_url}", tag = "imgproxy",
    params(
        ("signature" = String, Path, description = "HMAC-SHA256 of salt + the path after it, URL-safe base64 without padding; any placeholder (`insecure`, `_`) when the service has no key"),
        ("processing_options" = String, Path, description = "One or more `/`-separated options `name:arg:arg` (`rs:fill:300:200`, `q:85`, `g:ce`, …); an unknown option is refused"),
        ("source_url" = String, Path, description = "The percent-encoded source (`local:///photo.jpg` under --root, or an http:// URL under an --allow prefix), optionally `@` and the output extension (`@jpg`, `@png`)")),
    responses(
        (status = 200, description = "The processed image", content((Image = "image/jpeg"), (Image = "image/png"))),
        (status = 400, description = "A malformed URL or option", body = String, content_type = "text/plain"),
        (status = 403, description = "A bad signature, or a source outside --root or the --allow prefixes", body = String, content_type = "text/plain"),
        (status = 404, description = "No such source", body = String, content_type = "text/plain"),
        (status = 413, description = "A source over --max-bytes or --max-pixels", body = String, content_type = "text/plain"),
        (status = 415, description = "Not a JPEG or PNG", body = String, content_type = "text/plain"),
        (status = 422, description = "A malformed image, an output over the pixel limit or a job over --max-job-memory", body = String, content_type = "text/plain"),
        (status = 502, description = "The source could not be fetched", body = String, content_type = "text/plain"),
        (status = 503, description = "Every worker busy and the queue full (with Retry-After), a job past --job-timeout, or shutting down", body = String, content_type = "text/plain")))]
#[allow(dead_code)]
fn imgproxy_plain() {}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "This OpenAPI document", body = Object)))]
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The OpenAPI document of `remora resize serve`.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "remora resize",
        description = "JPEG/PNG resizing over HTTP: imgproxy's URL API over a source folder and allowed URL prefixes, a POST API with ImageMagick geometry, health and Prometheus metrics. Errors are text/plain reasons."
    ),
    paths(
        post_resize,
        imgproxy_plain,
        get_imgproxy,
        health,
        metrics,
        openapi_json
    ),
    components(schemas(Image))
)]
pub struct ApiDoc;
