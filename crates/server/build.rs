//! Generates the Envoy rate limit service's types, server and client from
//! `proto/` with protox (a pure-Rust protobuf compiler: no `protoc` needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/envoy/service/ratelimit/v3/rls.proto"];
    for file in &files {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
