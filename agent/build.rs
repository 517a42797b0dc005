//! Generates the kubelet PodResources v1 gRPC client (and the server trait the tests' stand-in
//! kubelet implements) from `proto/podresources/v1/api.proto`. protox parses the proto in Rust,
//! so building needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_build::configure().build_client(true).build_server(true).build_transport(false).compile_fds(fds)?;
    Ok(())
}
