//! The HTTP routes, one module per group. Each decodes its request, asks
//! `decide`, and returns an [`Answer`](crate::answer::Answer) or an
//! [`ApiError`](crate::error::ApiError); none picks a status code itself.

pub(crate) mod admin;
pub(crate) mod dashboard;
pub(crate) mod databox;
pub(crate) mod decision;
pub(crate) mod envoy_json;
pub(crate) mod health;
pub(crate) mod overrides;
