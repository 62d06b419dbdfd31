pub mod objectmeta;
pub mod validation;
