# Sourced by the GPU machine's wgpu scripts: NVIDIA's Vulkan ICD through the loader and GLVND
# carried in .gl/ (the machine has the ICD but neither), and the ICD's manifest.
if ! ldconfig -p | grep -q libGLdispatch.so.0; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
    if [ -e "$icd" ]; then export VK_DRIVER_FILES=$icd; break; fi
done
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
