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

pub fn open() -> Result<Gpu, WgpuError> {
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
    Ok(Gpu {
        device,
        queue,
        info,
        limits,
        timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
    })
}
