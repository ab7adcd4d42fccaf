//! The Envoy rate limit service's protobuf types, gRPC server and client,
//! generated at build time from `proto/` (see `build.rs`). The module tree
//! follows the protobuf packages, which the generated code relies on.

#![allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::unwrap_used,
    clippy::expect_used
)]

/// Envoy's packages.
pub mod envoy {
    /// `envoy.config.*`.
    pub mod config {
        /// `envoy.config.core.*`.
        pub mod core {
            /// `envoy.config.core.v3`.
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.config.core.v3.rs"));
            }
        }
    }
    /// `envoy.extensions.*`.
    pub mod extensions {
        /// `envoy.extensions.common.*`.
        pub mod common {
            /// `envoy.extensions.common.ratelimit.*`.
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`.
                pub mod v3 {
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/envoy.extensions.common.ratelimit.v3.rs"
                    ));
                }
            }
        }
    }
    /// `envoy.type.*`.
    pub mod r#type {
        /// `envoy.type.v3`.
        pub mod v3 {
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
        }
    }
    /// `envoy.service.*`.
    pub mod service {
        /// `envoy.service.ratelimit.*`.
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`.
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.service.ratelimit.v3.rs"));
            }
        }
    }
}
