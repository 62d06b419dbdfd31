//! What the rest of gpuslice agrees on: slice requests read from annotations and the
//! environment ([`request`], [`quantity`]), the arbiter's control protocol ([`protocol`]) and
//! its one client ([`client`]: a Unix socket, one line each way), and the node configuration
//! file ([`config`]). No other I/O than the client's socket and reading a config file.

pub mod client;
pub mod config;
pub mod interposer;
pub mod pod;
pub mod protocol;
pub mod quantity;
pub mod request;

pub use config::{
    BackstopAction, BackstopConfig, Config, ConfigError, FailMode, KubernetesConfig, Placement,
    RuntimeConfig,
};
pub use pod::PodRef;
pub use protocol::{
    AssignedDevice, BackstopEvent, ContextStatus, DeviceStatus, ErrorCode, ForeignProcess,
    NodeStatus, Owner, ProcessFootprint, Request, RequestEnvelope, Response, ResponseEnvelope,
    ShareStatus, SliceStatus, PROTOCOL_VERSION,
};
pub use quantity::{ByteSize, MemoryRequest, QuantityError};
pub use request::{DeviceRef, DeviceSelector, Priority, RequestError, SliceRequest};
