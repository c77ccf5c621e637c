#!/bin/sh
# Sensitivity of reference predictions to the unconfirmed ([U]) hardware
# and compiler parameters: one row per (parameter, value), step time of the
# four seeds, one ResNet-50 and one Mask R-CNN row.  docs/VALIDATION.md
# records the output (the doctables suite checks it is current).
# hbm.capacity_gib=64 lets the 3D UNet 128^3 run that tpuemu's memory model
# says does not fit (capacity does not change timing).
set -u
cd "$(dirname "$0")/.."
bin=${TPUEMU:-./tpuemu}
traces="traces/reference/retinanet-1280-v3-8.json traces/reference/retinanet-2560-v3-64.json traces/reference/unet3d-128-v3-8.json traces/reference/unet3d-256-v3-128.json traces/reference/resnet50-v3-512.json traces/reference/maskrcnn-v3-128.json"
row() {
  printf '| %-32s |' "$1"
  # a --set key may be given once: the capacity row sets its own
  cap="--set hbm.capacity_gib=64"
  case "$2" in *hbm.capacity_gib*) cap="" ;; esac
  for t in $traces; do
    # --quiet prints 9 significant digits; the table keeps microseconds
    if s=$("$bin" run "$t" --quiet $cap $2 2>/dev/null); then
      printf ' %8.6f |' "$s"
    else
      printf ' %8s |' "err"
    fi
  done
  printf '\n'
}
echo "| setting                          | ret-1280 | ret-2560 | unet-128 | unet-256 | rn50-512 | mrcnn-128 |"
echo "|----------------------------------|----------|----------|----------|----------|----------|-----------|"
row "defaults" ""
row "mxu.op_overhead_cycles=128" "--set mxu.op_overhead_cycles=128"
row "mxu.op_overhead_cycles=512" "--set mxu.op_overhead_cycles=512"
row "vpu.op_overhead_cycles=256" "--set vpu.op_overhead_cycles=256"
row "clock_hz=700e6 (v3 at v2 clock)" "--set clock_hz=700e6"
row "hbm.t_rcd_ns,t_rp_ns,t_cl_ns=28" "--set hbm.t_rcd_ns=28 --set hbm.t_rp_ns=28 --set hbm.t_cl_ns=28"
row "hbm.bandwidth_gbs=300" "--set hbm.bandwidth_gbs=300"
row "ici.link_gbs=41 (half)" "--set ici.link_gbs=41"
row "ici.link_gbs=100 (scaling book)" "--set ici.link_gbs=100"
row "ici.hop_latency_s=5e-6" "--set ici.hop_latency_s=5e-6"
row "ici.wrap=1" "--set ici.wrap=1"
row "xla.halo_copy=0" "--set xla.halo_copy=0"
row "xla.conv_pad=0 (im2col rule)" "--set xla.conv_pad=0"
row "xla.conv_pad_batch=0 (features)" "--set xla.conv_pad_batch=0"
row "xla.halo_fused=0" "--set xla.halo_fused=0"
row "xla.dw_halo=0" "--set xla.dw_halo=0"
row "xla.dw_allreduce=0" "--set xla.dw_allreduce=0"
row "xla.bn_stats_fused=0" "--set xla.bn_stats_fused=0"
row "xla.bn_apply_fused=0" "--set xla.bn_apply_fused=0"
row "xla.conv_pad_min_features=1" "--set xla.conv_pad_min_features=1"
row "hbm.capacity_gib=16 (xla.remat)" "--set hbm.capacity_gib=16"
row "xla.remat=0 (capacity 64)" "--set xla.remat=0"
row "xla.tile_search=0 (largest tile)" "--set xla.tile_search=0"
row "xla.scatter_update_ns=15" "--set xla.scatter_update_ns=15"
row "xla.scatter_update_ns=1000" "--set xla.scatter_update_ns=1000"
# Not parameters: which layers the RetinaNet reference freezes.  The traces
# follow models/official/detection's 2019 base_config (conv1 and res2 with
# their batchnorms); models/official/retinanet freezes conv1's kernel only;
# later detection configs freeze nothing (traces/README.md).  --freeze adds
# to what a trace freezes (none thaws everything), so "conv1 only" is still
# a variant of the traces with the other "trainable": false removed.
variant() {
  label=$1
  script=$2
  dir=$(mktemp -d)
  list=""
  for t in $traces; do
    sed "$script" "$t" > "$dir/$(basename "$t")"
    list="$list $dir/$(basename "$t")"
  done
  saved=$traces
  traces=$list
  row "$label" ""
  traces=$saved
  rm -rf "$dir"
}
variant "conv1 frozen only (retinanet)  " '/"name": "conv1"/!s/, "trainable": false//'
row "all layers trainable (no freeze)" "--freeze none"
