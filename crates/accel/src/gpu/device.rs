//! Device selection and the pipeline cache.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::buffers::{BufferPool, WAIT};
use super::counters::{Counters, GpuCounters};

/// Which adapters may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuPolicy {
    /// A real GPU only (discrete, integrated or virtual); the default. A CPU-type Vulkan device
    /// such as lavapipe is slower than the CPU engines, so it is never picked silently.
    Hardware,
    /// Any adapter, a CPU-type one included (tests, CI, trying shaders without a GPU).
    Any,
    /// No GPU at all.
    Off,
}

impl GpuPolicy {
    /// The policy named by `REMORA_GPU`: unset, `gpu` or `hardware` → [`Hardware`](Self::Hardware);
    /// `any` or `cpu` → [`Any`](Self::Any); `off`, `none` or `0` → [`Off`](Self::Off).
    pub fn from_env() -> Result<Self, GpuError> {
        match std::env::var("REMORA_GPU") {
            Err(_) => Ok(Self::Hardware),
            Ok(v) => Self::parse(&v),
        }
    }

    /// Parses a policy name (see [`from_env`](Self::from_env)).
    pub fn parse(v: &str) -> Result<Self, GpuError> {
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "gpu" | "hardware" => Ok(Self::Hardware),
            "any" | "cpu" => Ok(Self::Any),
            "off" | "none" | "0" => Ok(Self::Off),
            other => Err(GpuError::Policy(format!(
                "REMORA_GPU={other:?} is not one of gpu, any, off"
            ))),
        }
    }
}

/// Why no GPU engine could be used, or what went wrong on the device.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GpuError {
    /// `REMORA_GPU=off`, or an unknown value.
    #[error("{0}")]
    Policy(String),
    /// No adapter fits the policy; each one seen with the reason it was passed over.
    #[error("no usable GPU adapter ({})", if .0.is_empty() { "no Vulkan adapter found: install a GPU driver, or mesa-vulkan-drivers and REMORA_GPU=any".to_string() } else { .0.join("; ") })]
    NoAdapter(Vec<String>),
    /// The adapter refused to open a device.
    #[error("opening {adapter}: {reason}")]
    Device {
        /// Adapter name.
        adapter: String,
        /// wgpu's reason.
        reason: String,
    },
    /// A shader failed validation (a bug in remora, reported rather than panicking).
    #[error("compiling GPU kernel {name}: {reason}")]
    Shader {
        /// Pipeline name.
        name: String,
        /// The validation error.
        reason: String,
    },
    /// A buffer would exceed the device's limit.
    #[error("{what}: {bytes} bytes exceed the device limit of {limit} bytes")]
    TooLarge {
        /// What was being allocated.
        what: &'static str,
        /// Bytes asked for.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Waiting for, or mapping, device work failed (device lost, timeout).
    #[error("GPU transfer: {0}")]
    Transfer(String),
}

/// The device in use, as reported in results and errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// Adapter name (e.g. `NVIDIA H100 80GB HBM3`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    pub kind: &'static str,
    /// Graphics API (`vulkan`).
    pub backend: String,
    /// Driver and version.
    pub driver: String,
    /// Largest storage buffer one binding can see.
    pub max_binding: u64,
    /// Largest buffer.
    pub max_buffer: u64,
}

impl std::fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, {}, {}; binding ≤ {} MiB)",
            self.name,
            self.kind,
            self.backend,
            self.driver,
            self.max_binding >> 20
        )
    }
}

fn kind_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::DiscreteGpu => "discrete",
        wgpu::DeviceType::IntegratedGpu => "integrated",
        wgpu::DeviceType::VirtualGpu => "virtual",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    }
}

/// Whether the machine exposes a GPU to user space: a DRM render node (Intel, AMD, NVIDIA's
/// open driver and others), NVIDIA's proprietary device nodes, or AMD's compute node.
fn hardware_present() -> bool {
    let nodes = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd"];
    nodes.iter().any(|n| std::path::Path::new(n).exists())
        || std::fs::read_dir("/dev/dri").is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("renderD"))
        })
}

/// Preference among adapters that fit the policy (lower first).
fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// One opened device with its queue, pipeline cache and buffer pool. Cheap to share (`Arc`).
pub struct Gpu {
    pub(super) device: wgpu::Device,
    pub(super) queue: wgpu::Queue,
    info: GpuInfo,
    limits: wgpu::Limits,
    pipelines: Mutex<HashMap<(String, String), Arc<wgpu::ComputePipeline>>>,
    pub(super) pool: BufferPool,
    pub(super) counters: Counters,
    features: wgpu::Features,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.info).finish()
    }
}

impl Gpu {
    /// The process' device under the policy in `REMORA_GPU`, opened once and shared; the same
    /// error on every call when there is none.
    pub fn shared() -> Result<Arc<Gpu>, GpuError> {
        static SHARED: OnceLock<Result<Arc<Gpu>, GpuError>> = OnceLock::new();
        SHARED
            .get_or_init(|| GpuPolicy::from_env().and_then(Gpu::open))
            .clone()
    }

    /// The device tests run on, opened once per process: `REMORA_GPU`'s choice when the
    /// variable is set (and a panic, failing the test, when that opens nothing: `make test`
    /// sets `REMORA_GPU=any` so GPU tests never skip silently), else any adapter, a CPU-type
    /// one included. `None`, with the reason printed, only when the variable is unset and no
    /// adapter exists.
    pub fn for_tests() -> Option<Arc<Gpu>> {
        static TEST: OnceLock<Option<Arc<Gpu>>> = OnceLock::new();
        TEST.get_or_init(|| {
            let asked = std::env::var_os("REMORA_GPU").is_some();
            let policy = match GpuPolicy::from_env() {
                Ok(p) if asked => p,
                Ok(_) => GpuPolicy::Any,
                Err(e) => panic!("{e}"),
            };
            match Gpu::open(policy) {
                Ok(g) => Some(g),
                Err(e) if !asked => {
                    eprintln!("GPU tests skipped: {e}");
                    None
                }
                Err(e) => panic!("REMORA_GPU is set but no device opened: {e}"),
            }
        })
        .clone()
    }

    /// Opens the best adapter the policy allows.
    pub fn open(policy: GpuPolicy) -> Result<Arc<Gpu>, GpuError> {
        if policy == GpuPolicy::Off {
            return Err(GpuError::Policy("GPU disabled (REMORA_GPU=off)".into()));
        }
        // Without a GPU device node there is no hardware adapter to find: do not load the
        // Vulkan drivers at all (Mesa's software driver prints warnings when it loads without
        // a desktop session, and every auto-selecting program would show them).
        if policy == GpuPolicy::Hardware && !hardware_present() {
            return Err(GpuError::NoAdapter(vec![
                "no GPU device node on this machine (/dev/dri/renderD*, /dev/nvidia*, /dev/kfd)"
                    .into(),
            ]));
        }
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        let instance = wgpu::Instance::new(desc);
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN));
        let mut seen = Vec::new();
        let mut usable = Vec::new();
        for a in adapters {
            let i = a.get_info();
            if i.device_type == wgpu::DeviceType::Cpu && policy == GpuPolicy::Hardware {
                seen.push(format!(
                    "{} is a CPU-type device, slower than the CPU engines (REMORA_GPU=any uses it)",
                    i.name
                ));
            } else {
                usable.push(a);
            }
        }
        usable.sort_by_key(|a| rank(a.get_info().device_type));
        let Some(adapter) = usable.into_iter().next() else {
            return Err(GpuError::NoAdapter(seen));
        };
        let i = adapter.get_info();
        let limits = adapter.limits();
        // Host-visible storage buffers (results written where the host maps them, so only
        // what a frame produced crosses the bus) and timestamps, where the device has them.
        let features = adapter.features()
            & (wgpu::Features::MAPPABLE_PRIMARY_BUFFERS
                | wgpu::Features::TIMESTAMP_QUERY
                | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("remora"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::default(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| GpuError::Device {
            adapter: i.name.clone(),
            reason: e.to_string(),
        })?;
        let info = GpuInfo {
            name: i.name.clone(),
            kind: kind_name(i.device_type),
            backend: format!("{:?}", i.backend).to_lowercase(),
            driver: format!("{} {}", i.driver, i.driver_info).trim().to_string(),
            max_binding: limits.max_storage_buffer_binding_size,
            max_buffer: limits.max_buffer_size,
        };
        tracing::info!(device = %info, "GPU opened");
        Ok(Arc::new(Gpu {
            device,
            queue,
            info,
            limits,
            pipelines: Mutex::new(HashMap::new()),
            pool: BufferPool::default(),
            counters: Counters::default(),
            features,
        }))
    }

    /// What this device has been asked to do so far (see [`GpuCounters`]).
    pub fn counters(&self) -> GpuCounters {
        self.counters.snapshot()
    }

    /// The optional features this device was opened with (a subset of
    /// `MAPPABLE_PRIMARY_BUFFERS` and the timestamp queries).
    pub fn features(&self) -> wgpu::Features {
        self.features
    }

    /// The device in use.
    pub fn info(&self) -> &GpuInfo {
        &self.info
    }

    /// The device's limits (as granted: the adapter's best).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }

    /// The wgpu device, for engines that build their own bind groups and passes.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The compute pipeline for `entry` in `wgsl`, compiled on first use and cached under
    /// `name` (the layout is derived from the shader).
    pub fn pipeline(
        &self,
        name: &str,
        wgsl: &str,
        entry: &str,
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        let key = (name.to_string(), entry.to_string());
        if let Some(p) = self.pipelines.lock().expect("pipelines").get(&key) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(name),
                source: wgpu::ShaderSource::Wgsl(wgsl.into()),
            });
        let p = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&format!("{name}::{entry}")),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(GpuError::Shader {
                name: format!("{name}::{entry}"),
                reason: e.to_string(),
            });
        }
        Counters::add(&self.counters.pipelines, 1);
        let p = Arc::new(p);
        self.pipelines
            .lock()
            .expect("pipelines")
            .insert(key, p.clone());
        Ok(p)
    }

    /// A bind group for group 0 of `pipeline`: binding `i` sees `bindings[i]` (a whole buffer
    /// or a range of one).
    pub fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        bindings: &[wgpu::BindingResource<'_>],
    ) -> wgpu::BindGroup {
        let numbered: Vec<_> = (0u32..).zip(bindings.iter().cloned()).collect();
        self.bind_at(pipeline, &numbered)
    }

    /// A bind group for group 0 of `pipeline` with explicit binding numbers (for entry points
    /// that use only some of a module's bindings).
    pub fn bind_at(
        &self,
        pipeline: &wgpu::ComputePipeline,
        bindings: &[(u32, wgpu::BindingResource<'_>)],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = bindings
            .iter()
            .map(|(i, r)| wgpu::BindGroupEntry {
                binding: *i,
                resource: r.clone(),
            })
            .collect();
        Counters::add(&self.counters.bind_groups, 1);
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Records one dispatch whose grid the device itself wrote (three u32 at `offset` in
    /// `args`, a buffer with `INDIRECT` usage): later stages sized by earlier ones without a
    /// round trip to the host.
    pub fn dispatch_indirect(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::ComputePipeline,
        bind: &wgpu::BindGroup,
        args: &wgpu::Buffer,
        offset: u64,
    ) {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, bind, &[]);
        pass.dispatch_workgroups_indirect(args, offset);
    }

    /// Records one dispatch of `groups` workgroups (split over y when beyond the per-dimension
    /// limit; shaders fold `id.y` back in with [`row_stride`](Self::row_stride)).
    pub fn dispatch(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::ComputePipeline,
        bind: &wgpu::BindGroup,
        groups: u32,
    ) {
        let (x, y) = self.grid(groups);
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, bind, &[]);
        pass.dispatch_workgroups(x, y, 1);
    }

    /// The (x, y) grid for `groups` workgroups.
    pub fn grid(&self, groups: u32) -> (u32, u32) {
        let max = self.row_stride();
        if groups <= max {
            (groups.max(1), 1)
        } else {
            (max, groups.div_ceil(max))
        }
    }

    /// Workgroups per grid row in [`dispatch`](Self::dispatch): a shader's flat group index is
    /// `id.x + id.y * row_stride` (pass it in the shader's parameters).
    pub fn row_stride(&self) -> u32 {
        self.limits.max_compute_workgroups_per_dimension.min(32768)
    }

    /// Waits until all submitted work has finished.
    pub fn wait_idle(&self) -> Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: Some(WAIT),
            })
            .map(|_| ())
            .map_err(|e| GpuError::Transfer(e.to_string()))
    }
}
