//! Where a host run's wall time goes. The host-clock phases are taken on every run (a clock
//! read costs tens of nanoseconds); with tracing on, two more device events bracket the
//! uploads and the downloads, so the copies' device time shows beside the kernels'. Tracing
//! is off by default because each event record is a driver call on the run's path.

use crate::device::Device;
use cudarc::driver::CudaEvent;
use npu_runtime::Result;
use std::time::Instant;

/// One host run (`Executable::run`) split into phases, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunPhases {
    /// Host: validating and converting the inputs into staging, enqueuing their copies.
    pub upload_us: f64,
    /// Host: enqueuing the kernels (a graph replay) and the downloads.
    pub enqueue_us: f64,
    /// Host: waiting for the device.
    pub wait_us: f64,
    /// Host: building the output tensors from staging.
    pub outputs_us: f64,
    /// Device time of the same run's parts (tracing on only).
    pub device: Option<DevicePhases>,
}

/// Device time between events on the run's stream, microseconds: from the event recorded
/// before the inputs convert (so the host's conversion and enqueuing count, as the device
/// idles through them) to the kernels' start, the kernels, and from their end to the last
/// download's end.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DevicePhases {
    pub upload_us: f64,
    pub kernels_us: f64,
    pub download_us: f64,
}

/// Laps of the host clock through one run.
pub(super) struct Laps(Instant);

impl Laps {
    pub fn start() -> Laps {
        Laps(Instant::now())
    }

    /// Microseconds since the previous lap.
    pub fn lap(&mut self) -> f64 {
        let now = Instant::now();
        let us = now.duration_since(self.0).as_secs_f64() * 1e6;
        self.0 = now;
        us
    }
}

/// The two events that bracket a traced run's copies.
pub(super) struct Trace {
    before_upload: CudaEvent,
    after_download: CudaEvent,
}

impl Trace {
    pub fn new(dev: &Device) -> Result<Trace> {
        Ok(Trace {
            before_upload: dev.timing_event()?,
            after_download: dev.timing_event()?,
        })
    }

    pub fn mark_upload(&self, dev: &Device) -> Result<()> {
        Ok(dev.record_event(&self.before_upload, false)?)
    }

    pub fn mark_download(&self, dev: &Device) -> Result<()> {
        Ok(dev.record_event(&self.after_download, false)?)
    }

    /// The device phases of a synchronized run whose kernels lay between `marks`.
    pub fn device_phases(&self, marks: &(CudaEvent, CudaEvent)) -> DevicePhases {
        let us = |a: &CudaEvent, b: &CudaEvent| f64::from(a.elapsed_ms(b).unwrap_or(0.0)) * 1e3;
        DevicePhases {
            upload_us: us(&self.before_upload, &marks.0),
            kernels_us: us(&marks.0, &marks.1),
            download_us: us(&marks.1, &self.after_download),
        }
    }
}
