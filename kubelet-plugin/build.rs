//! Generates the gRPC code of the kubelet plugin APIs from `proto/` (vendored; see each file's
//! header). protox parses the files in Rust, so no `protoc` is needed on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/pluginregistration/v1/api.proto",
        "proto/dra/v1beta1/api.proto",
        "proto/dra/v1/api.proto",
        "proto/deviceplugin/v1beta1/api.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
