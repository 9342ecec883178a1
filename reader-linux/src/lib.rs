//! Reading side of OpenTelemetry process context (OTEP 4719) and thread context
//! (OTEP 4947): finds and reads another process's contexts on Linux.
#![warn(missing_docs)]
