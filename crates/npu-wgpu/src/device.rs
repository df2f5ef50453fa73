//! Opening a wgpu device: the first adapter in the order discrete GPU, integrated GPU, other,
//! CPU (a software Vulkan such as lavapipe, which lets CI run this backend), or the one
//! `NPU_WGPU_ADAPTER` names (a case-insensitive part of its name). The device gets the
//! adapter's own limits, so large tensors bind where the hardware allows it.

use crate::error::WgpuError;

/// An open device and its queue.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// The adapter writes timestamps at compute pass boundaries (`--profile`).
    pub timestamps: bool,
    /// The most bytes one binding (and one part of a larger buffer) holds: the adapter's
    /// limits, or less where asked, a multiple of 256 (so 16-byte views never straddle parts).
    pub max_binding: u64,
}

fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// Opens the device; `cap` (or `NPU_WGPU_MAX_BINDING`, in bytes) lowers the binding size
/// below the adapter's, which lets tests bind tensors in parts on any adapter.
pub fn open(cap: Option<u64>) -> Result<Gpu, WgpuError> {
    let cap = match cap {
        Some(c) => Some(c),
        None => match std::env::var("NPU_WGPU_MAX_BINDING") {
            Ok(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                WgpuError::Config(format!(
                    "NPU_WGPU_MAX_BINDING is '{v}', not a number of bytes"
                ))
            })?),
            Err(_) => None,
        },
    };
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    if let Ok(want) = std::env::var("NPU_WGPU_ADAPTER") {
        let want = want.to_lowercase();
        adapters.retain(|a| a.get_info().name.to_lowercase().contains(&want));
    }
    adapters.sort_by_key(|a| rank(a.get_info().device_type));
    let adapter = adapters.into_iter().next().ok_or_else(|| {
        WgpuError::NoAdapter(match std::env::var("NPU_WGPU_ADAPTER") {
            Ok(w) => format!("none whose name contains '{w}' (NPU_WGPU_ADAPTER)"),
            Err(_) => "no Vulkan, Metal or DX12 driver answered".into(),
        })
    })?;
    let info = adapter.get_info();
    let limits = adapter.limits();
    let features = adapter.features() & wgpu::Features::TIMESTAMP_QUERY;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("npu"),
        required_features: features,
        required_limits: limits.clone(),
        ..Default::default()
    }))
    .map_err(|e| WgpuError::Device {
        adapter: info.name.clone(),
        message: e.to_string(),
    })?;
    let max_binding = limits
        .max_storage_buffer_binding_size
        .min(limits.max_buffer_size)
        .min(cap.unwrap_or(u64::MAX))
        / 256
        * 256;
    if max_binding == 0 {
        return Err(WgpuError::Config(format!(
            "a binding limit of {} bytes; at least 256 are needed",
            cap.unwrap_or(0)
        )));
    }
    Ok(Gpu {
        max_binding,
        device,
        queue,
        info,
        limits,
        timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
    })
}
