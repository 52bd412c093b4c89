//! The API's error answer, `{"error": "..."}`: apart from `http` (which re-exports it) because
//! the token check in front of the handlers (`auth`) answers with it too.
use serde::Serialize;
use utoipa::ToSchema;

/// An error answer: `{"error": "..."}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiError {
    /// What went wrong, for people.
    pub error: String,
}
