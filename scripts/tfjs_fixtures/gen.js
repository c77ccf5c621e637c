// Writes test/keras/tfjs/: models built with TensorFlow.js layers (the
// versions pinned in package.json), each as
//   NAME.json        model.toJSON(): the Keras config tfjs writes
//   NAME.model.json  what model.save() writes as model.json (modelTopology,
//                    format, generatedBy, weightsManifest), captured by a
//                    save handler: no files API, no browser
//   NAME.tfjs.json   tfjs's own model.countParams() and, per layer and per
//                    call (a shared layer has one per call), the output shape
// so that tpuemu's tests check the importer against tfjs without Node.
//
//   cd scripts/tfjs_fixtures && npm ci && node gen.js [OUTDIR]
//
// Every layer is named: tfjs's generated names carry a process-wide
// counter, and explicit names keep the files stable from run to run.
'use strict';

const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs-core');
require('@tensorflow/tfjs-backend-cpu');
const tfl = require('@tensorflow/tfjs-layers');

const L = tfl.layers;
const OUT = process.argv[2] ||
    path.join(__dirname, '..', '..', 'test', 'keras', 'tfjs');

// A Sequential CNN: convolutions with and without an activation argument,
// batchnorm, ReLU layers, pooling, dropout, flatten and dense heads.
function seqCnn() {
  const m = tfl.sequential({name: 'seq_cnn'});
  m.add(L.conv2d({name: 'c1', inputShape: [32, 32, 3], filters: 16,
                  kernelSize: 3, padding: 'same', useBias: false}));
  m.add(L.batchNormalization({name: 'bn1'}));
  m.add(L.reLU({name: 'r1'}));
  m.add(L.maxPooling2d({name: 'p1', poolSize: 2}));
  m.add(L.conv2d({name: 'c2', filters: 32, kernelSize: 3,
                  activation: 'relu'}));
  m.add(L.batchNormalization({name: 'bn2'}));
  m.add(L.reLU({name: 'r2', maxValue: 6}));
  m.add(L.averagePooling2d({name: 'p2', poolSize: 2, strides: 2}));
  m.add(L.dropout({name: 'd1', rate: 0.25}));
  m.add(L.flatten({name: 'f'}));
  m.add(L.dense({name: 'fc1', units: 64, activation: 'relu'}));
  m.add(L.dropout({name: 'd2', rate: 0.5}));
  m.add(L.dense({name: 'fc2', units: 32, activation: 'tanh'}));
  m.add(L.dense({name: 'out', units: 10, activation: 'softmax'}));
  return m;
}

// A functional ResNet-style block: conv-bn-relu twice with an Add
// shortcut, a projection shortcut with stride, a Concatenate, and one
// convolution called on two tensors (a shared layer).
function resBlock() {
  const x = tfl.input({name: 'img', shape: [16, 16, 8]});
  let y = L.conv2d({name: 'a_conv1', filters: 8, kernelSize: 3,
                    padding: 'same', useBias: false}).apply(x);
  y = L.batchNormalization({name: 'a_bn1'}).apply(y);
  y = L.activation({name: 'a_relu1', activation: 'relu'}).apply(y);
  y = L.conv2d({name: 'a_conv2', filters: 8, kernelSize: 3,
                padding: 'same', useBias: false}).apply(y);
  y = L.batchNormalization({name: 'a_bn2'}).apply(y);
  let a = L.add({name: 'a_add'}).apply([x, y]);
  a = L.activation({name: 'a_out', activation: 'relu'}).apply(a);

  let b = L.conv2d({name: 'b_conv1', filters: 16, kernelSize: 3,
                    strides: 2, padding: 'same'}).apply(a);
  b = L.batchNormalization({name: 'b_bn1'}).apply(b);
  b = L.reLU({name: 'b_relu1'}).apply(b);
  b = L.conv2d({name: 'b_conv2', filters: 16, kernelSize: 3,
                padding: 'same'}).apply(b);
  const sc = L.conv2d({name: 'b_proj', filters: 16, kernelSize: 1,
                       strides: 2}).apply(a);
  b = L.add({name: 'b_add'}).apply([b, sc]);
  b = L.reLU({name: 'b_out'}).apply(b);

  const shared = L.conv2d({name: 'tower', filters: 16, kernelSize: 3,
                           padding: 'same', activation: 'relu'});
  const t0 = shared.apply(b);
  const t1 = shared.apply(sc);
  const c = L.concatenate({name: 'cat', axis: -1}).apply([t0, t1, b]);
  const g = L.globalAveragePooling2d({name: 'gap'}).apply(c);
  const o = L.dense({name: 'logits', units: 10}).apply(g);
  return tfl.model({name: 'res_block', inputs: x, outputs: o});
}

// The ops the importer maps beyond a plain CNN: depthwise and separable
// convolutions, activation layers (LeakyReLU, PReLU, ELU), squeeze-excite
// (GlobalAveragePooling2D, Dense, Reshape, Multiply), padding, cropping,
// nearest and bilinear upsampling, LayerNormalization and a transposed
// convolution.
function opsBlock() {
  const x = tfl.input({name: 'img', shape: [32, 32, 3]});
  let y = L.zeroPadding2d({name: 'pad', padding: [[1, 2], [2, 1]]}).apply(x);
  y = L.conv2d({name: 'stem', filters: 16, kernelSize: 3, strides: 2})
          .apply(y);
  y = L.leakyReLU({name: 'lrelu', alpha: 0.1}).apply(y);
  y = L.depthwiseConv2d({name: 'dw', kernelSize: 3, padding: 'same',
                         depthMultiplier: 2, useBias: false}).apply(y);
  y = L.batchNormalization({name: 'dw_bn'}).apply(y);
  y = L.prelu({name: 'prelu', sharedAxes: [1, 2]}).apply(y);
  y = L.separableConv2d({name: 'sep', filters: 24, kernelSize: 3,
                         padding: 'same'}).apply(y);
  y = L.elu({name: 'elu'}).apply(y);

  // Squeeze-excite: a per-channel gate broadcast over the feature map.
  let s = L.globalAveragePooling2d({name: 'se_gap'}).apply(y);
  s = L.dense({name: 'se_reduce', units: 6, activation: 'relu'}).apply(s);
  s = L.dense({name: 'se_expand', units: 24, activation: 'sigmoid'})
          .apply(s);
  s = L.reshape({name: 'se_reshape', targetShape: [1, 1, 24]}).apply(s);
  y = L.multiply({name: 'se_mul'}).apply([y, s]);

  y = L.cropping2D({name: 'crop', cropping: [[1, 1], [2, 0]]}).apply(y);
  const up = L.upSampling2d({name: 'up_nearest', size: [2, 2]}).apply(y);
  const bl = L.upSampling2d({name: 'up_bilinear', size: [2, 2],
                             interpolation: 'bilinear'}).apply(y);
  y = L.add({name: 'up_add'}).apply([up, bl]);
  y = L.layerNormalization({name: 'ln'}).apply(y);
  y = L.conv2dTranspose({name: 'deconv', filters: 8, kernelSize: 3,
                         strides: 2, padding: 'same'}).apply(y);
  y = L.maxPooling2d({name: 'pool', poolSize: 4}).apply(y);
  y = L.globalMaxPooling2d({name: 'gmp'}).apply(y);
  const o = L.dense({name: 'logits', units: 5}).apply(y);
  return tfl.model({name: 'ops_block', inputs: x, outputs: o});
}

// A 1D sequence model: Conv1D (dilated, strided), pooling, spatial
// dropout, global poolings on a Concatenate.
function conv1d() {
  const x = tfl.input({name: 'seq', shape: [128, 4]});
  let y = L.conv1d({name: 'c1', filters: 16, kernelSize: 5,
                    activation: 'relu'}).apply(x);
  y = L.maxPooling1d({name: 'p1', poolSize: 2}).apply(y);
  y = L.conv1d({name: 'c2', filters: 32, kernelSize: 3, dilationRate: 2,
                padding: 'same'}).apply(y);
  y = L.batchNormalization({name: 'bn'}).apply(y);
  y = L.activation({name: 'act', activation: 'elu'}).apply(y);
  y = L.spatialDropout1d({name: 'sd', rate: 0.1}).apply(y);
  y = L.conv1d({name: 'c3', filters: 32, kernelSize: 3, strides: 2})
          .apply(y);
  y = L.averagePooling1d({name: 'p2', poolSize: 2}).apply(y);
  const a = L.globalAveragePooling1d({name: 'gap'}).apply(y);
  const m = L.globalMaxPooling1d({name: 'gmp'}).apply(y);
  const c = L.concatenate({name: 'cat'}).apply([a, m]);
  const o = L.dense({name: 'logits', units: 3}).apply(c);
  return tfl.model({name: 'conv1d', inputs: x, outputs: o});
}

// A volumetric model: Conv3D, 3D pooling, Conv3DTranspose.
function conv3d() {
  const m = tfl.sequential({name: 'conv3d'});
  m.add(L.conv3d({name: 'c1', inputShape: [8, 16, 16, 2], filters: 8,
                  kernelSize: 3, padding: 'same', activation: 'relu'}));
  m.add(L.maxPooling3d({name: 'p1', poolSize: 2}));
  m.add(L.conv3d({name: 'c2', filters: 16, kernelSize: [1, 3, 3],
                  useBias: false}));
  m.add(L.batchNormalization({name: 'bn'}));
  m.add(L.activation({name: 'act', activation: 'relu6'}));
  m.add(L.conv3dTranspose({name: 'up', filters: 4, kernelSize: 2,
                           strides: 2}));
  m.add(L.averagePooling3d({name: 'p2', poolSize: 2}));
  m.add(L.flatten({name: 'f'}));
  m.add(L.dense({name: 'out', units: 4, activation: 'sigmoid'}));
  return m;
}

// An Inception-style stem and blocks (InceptionV3's shapes, smaller): an
// odd input, stride-2 `valid` reductions, 1x7 / 7x1 asymmetric
// convolutions, average pooling `same` stride 1 and four-branch
// Concatenates on axis 3 (as Keras's inception_v3.py writes it).
function inception() {
  const x = tfl.input({name: 'img', shape: [79, 79, 3]});
  const cbr = (t, name, f, k, strides, padding) => {
    let y = L.conv2d({name: name + '_conv', filters: f, kernelSize: k,
                      strides: strides || 1, padding: padding || 'same',
                      useBias: false}).apply(t);
    y = L.batchNormalization({name: name + '_bn', axis: 3, scale: false})
            .apply(y);
    return L.activation({name: name + '_relu', activation: 'relu'}).apply(y);
  };
  let y = cbr(x, 's1', 16, 3, 2, 'valid');
  y = cbr(y, 's2', 16, 3, 1, 'valid');
  y = cbr(y, 's3', 24, 3);
  y = L.maxPooling2d({name: 's_pool', poolSize: 3, strides: 2}).apply(y);
  // Block A: 1x1, 5x5, double 3x3 and pool branches.
  const a1 = cbr(y, 'a_b1', 16, 1);
  let a5 = cbr(y, 'a_b5a', 12, 1);
  a5 = cbr(a5, 'a_b5b', 16, 5);
  let a3 = cbr(y, 'a_b3a', 16, 1);
  a3 = cbr(a3, 'a_b3b', 24, 3);
  a3 = cbr(a3, 'a_b3c', 24, 3);
  let ap = L.averagePooling2d({name: 'a_pool', poolSize: 3, strides: 1,
                               padding: 'same'}).apply(y);
  ap = cbr(ap, 'a_bp', 8, 1);
  y = L.concatenate({name: 'mixed_a', axis: 3}).apply([a1, a5, a3, ap]);
  // Reduction: stride-2 valid convolution and max pooling.
  const r3 = cbr(y, 'r_b3', 32, 3, 2, 'valid');
  let rd = cbr(y, 'r_bd1', 16, 1);
  rd = cbr(rd, 'r_bd2', 24, 3);
  rd = cbr(rd, 'r_bd3', 24, 3, 2, 'valid');
  const rp = L.maxPooling2d({name: 'r_pool', poolSize: 3, strides: 2})
                 .apply(y);
  y = L.concatenate({name: 'mixed_r', axis: 3}).apply([r3, rd, rp]);
  // Block B: factorised 7x7 as 1x7 then 7x1.
  const b1 = cbr(y, 'b_b1', 32, 1);
  let b7 = cbr(y, 'b_b7a', 16, 1);
  b7 = cbr(b7, 'b_b7b', 16, [1, 7]);
  b7 = cbr(b7, 'b_b7c', 32, [7, 1]);
  let bd = cbr(y, 'b_bd1', 16, 1);
  bd = cbr(bd, 'b_bd2', 16, [7, 1]);
  bd = cbr(bd, 'b_bd3', 32, [1, 7]);
  let bp = L.averagePooling2d({name: 'b_pool', poolSize: [3, 3],
                               strides: [1, 1], padding: 'same'}).apply(y);
  bp = cbr(bp, 'b_bp', 32, 1);
  y = L.concatenate({name: 'mixed_b', axis: -1}).apply([b1, b7, bd, bp]);
  // An asymmetric valid pair: 1x7 then 7x1 without padding.
  y = cbr(y, 'v_17', 32, [1, 7], 1, 'valid');
  y = cbr(y, 'v_71', 32, [7, 1], 1, 'valid');
  y = L.globalAveragePooling2d({name: 'avg_pool'}).apply(y);
  y = L.dropout({name: 'drop', rate: 0.2}).apply(y);
  const o = L.dense({name: 'predictions', units: 10, activation: 'softmax'})
                .apply(y);
  return tfl.model({name: 'inception', inputs: x, outputs: o});
}

// An Xception-style entry flow: a strided stem, SeparableConv2D blocks
// closed by MaxPooling `same` stride 2, residual Adds with a strided 1x1
// projection, and a strided `valid` SeparableConv2D.  No separable layer
// has a depth multiplier: tfjs-layers 4.22.0 leaves depth_multiplier out
// of SeparableConv2D's config, so such a model does not reload as built
// (write() checks that every model does).
function xception() {
  const x = tfl.input({name: 'img', shape: [71, 71, 3]});
  let y = L.conv2d({name: 'b1_conv1', filters: 16, kernelSize: 3,
                    strides: 2, useBias: false}).apply(x);
  y = L.batchNormalization({name: 'b1_conv1_bn'}).apply(y);
  y = L.activation({name: 'b1_conv1_act', activation: 'relu'}).apply(y);
  y = L.conv2d({name: 'b1_conv2', filters: 32, kernelSize: 3,
                useBias: false}).apply(y);
  y = L.batchNormalization({name: 'b1_conv2_bn'}).apply(y);
  y = L.activation({name: 'b1_conv2_act', activation: 'relu'}).apply(y);
  for (const [b, f, pre] of [['b2', 48, false], ['b3', 64, true]]) {
    let r = L.conv2d({name: b + '_res', filters: f, kernelSize: 1,
                      strides: 2, padding: 'same', useBias: false}).apply(y);
    r = L.batchNormalization({name: b + '_res_bn'}).apply(r);
    let z = y;
    if (pre)
      z = L.activation({name: b + '_sep1_act', activation: 'relu'}).apply(z);
    z = L.separableConv2d({name: b + '_sep1', filters: f, kernelSize: 3,
                           padding: 'same', useBias: false}).apply(z);
    z = L.batchNormalization({name: b + '_sep1_bn'}).apply(z);
    z = L.activation({name: b + '_sep2_act', activation: 'relu'}).apply(z);
    z = L.separableConv2d({name: b + '_sep2', filters: f, kernelSize: 3,
                           padding: 'same', useBias: false}).apply(z);
    z = L.batchNormalization({name: b + '_sep2_bn'}).apply(z);
    z = L.maxPooling2d({name: b + '_pool', poolSize: 3, strides: 2,
                        padding: 'same'}).apply(z);
    y = L.add({name: b + '_add'}).apply([z, r]);
  }
  y = L.separableConv2d({name: 'exit_sep', filters: 96, kernelSize: 3,
                         strides: 2, activation: 'relu'}).apply(y);
  y = L.globalMaxPooling2d({name: 'gmp'}).apply(y);
  const o = L.dense({name: 'predictions', units: 10, activation: 'softmax'})
                .apply(y);
  return tfl.model({name: 'xception', inputs: x, outputs: o});
}

// A 2D U-Net: `same` convolutions at the first level, `valid` ones below
// (the original U-Net's shrinking), so the decoder crops the skips with
// Cropping2D before each Concatenate; Conv2DTranspose stride 2 up, a 1x1
// sigmoid head.
function unet() {
  const x = tfl.input({name: 'img', shape: [68, 68, 1]});
  const conv = (t, name, f, padding) =>
      L.conv2d({name: name, filters: f, kernelSize: 3, padding: padding,
                activation: 'relu', kernelInitializer: 'heNormal'})
          .apply(t);
  let e1 = conv(x, 'e1_c1', 8, 'same');
  e1 = conv(e1, 'e1_c2', 8, 'same');                         // 68
  let e2 = L.maxPooling2d({name: 'e1_pool', poolSize: 2}).apply(e1);  // 34
  e2 = conv(e2, 'e2_c1', 16, 'valid');
  e2 = conv(e2, 'e2_c2', 16, 'valid');                       // 30
  let m = L.maxPooling2d({name: 'e2_pool', poolSize: 2}).apply(e2);   // 15
  m = conv(m, 'm_c1', 32, 'valid');                          // 13
  m = L.dropout({name: 'm_drop', rate: 0.5}).apply(m);
  let d2 = L.conv2dTranspose({name: 'd2_up', filters: 16, kernelSize: 2,
                              strides: 2, padding: 'same'}).apply(m);  // 26
  const s2 = L.cropping2D({name: 'd2_crop', cropping: 2}).apply(e2);
  d2 = L.concatenate({name: 'd2_cat'}).apply([s2, d2]);
  d2 = conv(d2, 'd2_c1', 16, 'same');
  let d1 = L.conv2dTranspose({name: 'd1_up', filters: 8, kernelSize: 2,
                              strides: 2, padding: 'same'}).apply(d2);  // 52
  const s1 = L.cropping2D({name: 'd1_crop', cropping: [[8, 8], [8, 8]]})
                 .apply(e1);
  d1 = L.concatenate({name: 'd1_cat', axis: 3}).apply([s1, d1]);
  d1 = conv(d1, 'd1_c1', 8, 'same');
  const o = L.conv2d({name: 'mask', filters: 1, kernelSize: 1,
                      activation: 'sigmoid'}).apply(d1);
  return tfl.model({name: 'unet', inputs: x, outputs: o});
}

// ConvNeXt-style: a patchify stem (4x4 stride 4) with LayerNormalization,
// blocks of DepthwiseConv2D 7x7, LayerNormalization, a pointwise Dense
// on the 4-D tensor (Keras's Dense acts on the last axis), gelu, Dense
// back, residual Add; a LayerNormalization + 2x2 stride-2 downsample.
function convnext() {
  const x = tfl.input({name: 'img', shape: [64, 64, 3]});
  let y = L.conv2d({name: 'stem_conv', filters: 24, kernelSize: 4,
                    strides: 4}).apply(x);
  y = L.layerNormalization({name: 'stem_ln', epsilon: 1e-6}).apply(y);
  const block = (t, name, c) => {
    let z = L.depthwiseConv2d({name: name + '_dw', kernelSize: 7,
                               padding: 'same'}).apply(t);
    z = L.layerNormalization({name: name + '_ln', epsilon: 1e-6}).apply(z);
    z = L.dense({name: name + '_pw1', units: 4 * c}).apply(z);
    z = L.activation({name: name + '_gelu', activation: 'gelu'}).apply(z);
    z = L.dense({name: name + '_pw2', units: c}).apply(z);
    return L.add({name: name + '_add'}).apply([t, z]);
  };
  y = block(y, 's0_b0', 24);
  y = block(y, 's0_b1', 24);
  y = L.layerNormalization({name: 'down_ln', epsilon: 1e-6}).apply(y);
  y = L.conv2d({name: 'down_conv', filters: 48, kernelSize: 2, strides: 2})
          .apply(y);
  y = block(y, 's1_b0', 48);
  y = L.globalAveragePooling2d({name: 'gap'}).apply(y);
  y = L.layerNormalization({name: 'head_ln', epsilon: 1e-6}).apply(y);
  const o = L.dense({name: 'head', units: 10, activation: 'gelu'}).apply(y);
  return tfl.model({name: 'convnext', inputs: x, outputs: o});
}

// What a CNN user writes around the backbone: a Sequential block nested
// in a functional model, dilated convolutions (`valid` and `same`),
// BatchNormalization on a Dense output, a three-input Add and an
// Average, and two outputs (a softmax class head and a linear box head).
function heads() {
  const stem = tfl.sequential({name: 'stem'});
  stem.add(L.conv2d({name: 'c1', inputShape: [48, 48, 3], filters: 16,
                     kernelSize: 3, strides: 2, padding: 'same',
                     useBias: false}));
  stem.add(L.batchNormalization({name: 'bn1'}));
  stem.add(L.reLU({name: 'r1'}));
  const x = tfl.input({name: 'img', shape: [48, 48, 3]});
  let y = stem.apply(x);
  const d1 = L.conv2d({name: 'dil_valid', filters: 16, kernelSize: 3,
                       dilationRate: 2, activation: 'relu'}).apply(y);
  const d2 = L.conv2d({name: 'dil_same', filters: 16, kernelSize: 3,
                       dilationRate: [2, 3], padding: 'same'}).apply(y);
  const d3 = L.depthwiseConv2d({name: 'dw_dil', kernelSize: 3,
                               dilationRate: 2, padding: 'same'}).apply(y);
  const cr = L.cropping2D({name: 'crop', cropping: 2}).apply(y);
  y = L.add({name: 'add3'}).apply([cr, d1, L.cropping2D({name: 'crop2',
                                                          cropping: 2})
                                              .apply(d2)]);
  const av = L.average({name: 'avg'}).apply([y, L.cropping2D({
                                                  name: 'crop3',
                                                  cropping: 2}).apply(d3)]);
  y = L.maxPooling2d({name: 'pool', poolSize: 2, padding: 'same'}).apply(av);
  y = L.flatten({name: 'flat'}).apply(y);
  let h = L.dense({name: 'fc', units: 32, useBias: false}).apply(y);
  h = L.batchNormalization({name: 'fc_bn'}).apply(h);
  h = L.activation({name: 'fc_relu', activation: 'relu'}).apply(h);
  const cls = L.dense({name: 'cls', units: 5, activation: 'softmax'})
                  .apply(h);
  const box = L.dense({name: 'box', units: 4}).apply(h);
  return tfl.model({name: 'heads', inputs: x, outputs: [cls, box]});
}

// A sequence model written as a CNN user would: Dense on a 3-D input
// (per step), LayerNormalization, a dilated Conv1D.  Not `causal`
// padding: tfjs-layers 4.22.0 cannot run it and infers its output as
// `valid`'s (test_import.c checks Keras's causal convolution).
function seqDense() {
  const x = tfl.input({name: 'tokens', shape: [16, 12]});
  let y = L.dense({name: 'embed', units: 32}).apply(x);
  y = L.layerNormalization({name: 'embed_ln'}).apply(y);
  y = L.conv1d({name: 'dilated', filters: 32, kernelSize: 3, dilationRate: 2,
                padding: 'same', activation: 'relu'}).apply(y);
  y = L.dense({name: 'mlp', units: 64, activation: 'tanh'}).apply(y);
  y = L.dropout({name: 'drop', rate: 0.1}).apply(y);
  y = L.globalAveragePooling1d({name: 'gap'}).apply(y);
  const o = L.dense({name: 'out', units: 3, activation: 'softmax'}).apply(y);
  return tfl.model({name: 'seq_dense', inputs: x, outputs: o});
}

// Tokens from a feature map: a strided Conv2D patchify, Reshape to
// (tokens, channels), Dense and LayerNormalization per token,
// GlobalAveragePooling1D (a ViT's or MLP-Mixer's first steps).
function patches() {
  const x = tfl.input({name: 'img', shape: [32, 32, 3]});
  let y = L.conv2d({name: 'patchify', filters: 32, kernelSize: 8,
                    strides: 8}).apply(x);
  y = L.reshape({name: 'tokens', targetShape: [16, 32]}).apply(y);
  y = L.layerNormalization({name: 'ln'}).apply(y);
  let z = L.dense({name: 'mlp1', units: 64, activation: 'gelu'}).apply(y);
  z = L.dense({name: 'mlp2', units: 32}).apply(z);
  y = L.add({name: 'res'}).apply([y, z]);
  y = L.globalAveragePooling1d({name: 'gap'}).apply(y);
  const o = L.dense({name: 'out', units: 10}).apply(y);
  return tfl.model({name: 'patches', inputs: x, outputs: o});
}

// Odd extents: a 1x1 stride-2 `same` convolution and `same` pooling on
// them, pooling with an uneven window, Conv2DTranspose `valid` with a 3x3
// kernel and `same` with a 4x4 one (a GAN's), UpSampling2D by (2, 3), a
// strided depthwise and separable convolution, a stride wider than the
// kernel; tfjs's own activation names (hardSigmoid), and a Softmax layer
// as the output.
function oddSizes() {
  const x = tfl.input({name: 'img', shape: [37, 45, 3]});
  let y = L.conv2d({name: 'c_s2', filters: 8, kernelSize: 1, strides: 2,
                    padding: 'same'}).apply(x);                   // 19x23
  y = L.maxPooling2d({name: 'mp_same', poolSize: 3, strides: 2,
                      padding: 'same'}).apply(y);                 // 10x12
  y = L.averagePooling2d({name: 'ap_valid', poolSize: [2, 3], strides: 1})
          .apply(y);                                              // 9x10
  y = L.conv2dTranspose({name: 'ct_valid', filters: 8, kernelSize: 3,
                         strides: 2}).apply(y);                   // 19x21
  y = L.conv2dTranspose({name: 'ct_same4', filters: 8, kernelSize: 4,
                         strides: 2, padding: 'same',
                         activation: 'hardSigmoid'}).apply(y);    // 38x42
  y = L.upSampling2d({name: 'up23', size: [2, 3]}).apply(y);      // 76x126
  y = L.depthwiseConv2d({name: 'dw_s2', kernelSize: 5, strides: 2,
                         depthMultiplier: 2}).apply(y);
  y = L.separableConv2d({name: 'sep_dm', filters: 12, kernelSize: 3,
                         strides: 2, padding: 'same',
                         activation: 'relu6'}).apply(y);
  y = L.zeroPadding2d({name: 'pad1'}).apply(y);
  y = L.conv2d({name: 'c_k2', filters: 8, kernelSize: 2, strides: 3,
                activation: 'swish'}).apply(y);
  y = L.globalAveragePooling2d({name: 'gap'}).apply(y);
  y = L.dense({name: 'logits', units: 6}).apply(y);
  const o = L.softmax({name: 'probs'}).apply(y);
  return tfl.model({name: 'odd_sizes', inputs: x, outputs: o});
}

// Two inputs (an image and a feature vector), and a functional backbone
// called on two images (a Siamese network: its convolutions share
// weights), a Maximum of the embeddings (tfjs-layers has no Subtract),
// the vector's softmax read by a Multiply (a per-feature gate).
function twoInputs() {
  const bi = tfl.input({name: 'b_in', shape: [32, 32, 3]});
  let b = L.conv2d({name: 'b_c1', filters: 8, kernelSize: 3,
                    activation: 'relu'}).apply(bi);
  b = L.maxPooling2d({name: 'b_pool', poolSize: 2}).apply(b);
  b = L.conv2d({name: 'b_c2', filters: 16, kernelSize: 3,
                padding: 'same'}).apply(b);
  b = L.globalAveragePooling2d({name: 'b_gap'}).apply(b);
  const backbone = tfl.model({name: 'backbone', inputs: bi, outputs: b});

  const a = tfl.input({name: 'left', shape: [32, 32, 3]});
  const c = tfl.input({name: 'right', shape: [32, 32, 3]});
  const meta = tfl.input({name: 'meta', shape: [6]});
  const ea = backbone.apply(a);
  const ec = backbone.apply(c);
  const d = L.maximum({name: 'pair_max'}).apply([ea, ec]);
  let m = L.dense({name: 'meta_fc', units: 16, activation: 'relu'})
              .apply(meta);
  m = L.dense({name: 'meta_gate', units: 16}).apply(m);
  const g = L.activation({name: 'meta_softmax', activation: 'softmax'})
                .apply(m);
  const w = L.multiply({name: 'weighted'}).apply([d, g]);
  let y = L.concatenate({name: 'cat'}).apply([w, ea, ec]);
  y = L.dense({name: 'fc', units: 16, activation: 'elu'}).apply(y);
  const o = L.dense({name: 'same_pair', units: 1, activation: 'sigmoid'})
                .apply(y);
  return tfl.model({name: 'two_inputs', inputs: [a, c, meta], outputs: o});
}

// CBAM's spatial attention and an Attention U-Net gate: one value per
// position broadcast over the channels, by a Multiply and by an Add.
function spatialGate() {
  const x = tfl.input({name: 'img', shape: [16, 16, 3]});
  const f = L.conv2d({name: 'feat', filters: 8, kernelSize: 3,
                      padding: 'same', activation: 'relu'}).apply(x);
  const s = L.conv2d({name: 'gate', filters: 1, kernelSize: 7,
                      padding: 'same', activation: 'sigmoid'}).apply(f);
  const y = L.multiply({name: 'gated'}).apply([f, s]);
  const b = L.conv2d({name: 'shift', filters: 1, kernelSize: 1})
                .apply(y);
  const z = L.add({name: 'shifted'}).apply([b, y]);
  const o = L.dense({name: 'out', units: 2}).apply(
      L.globalAveragePooling2d({name: 'gap'}).apply(z));
  return tfl.model({name: 'spatial_gate', inputs: x, outputs: o});
}

// A Siamese network, as change detection on image pairs uses: a nested
// backbone (conv, batchnorm, pooling, a dense embedding) called on both
// images, then a LayerNormalization and a Dense called on both
// embeddings.  Every shared layer's weights count once, batchnorm's moving
// statistics included.
function sharedBn() {
  const bi = tfl.input({name: 'b_in', shape: [16, 16, 3]});
  let b = L.conv2d({name: 'b_c', filters: 4, kernelSize: 3}).apply(bi);
  b = L.batchNormalization({name: 'b_bn'}).apply(b);
  b = L.globalAveragePooling2d({name: 'b_gap'}).apply(b);
  b = L.dense({name: 'b_emb', units: 8}).apply(b);
  const bb = tfl.model({name: 'bb', inputs: bi, outputs: b});
  const a = tfl.input({name: 'left', shape: [16, 16, 3]});
  const c = tfl.input({name: 'right', shape: [16, 16, 3]});
  const ln = L.layerNormalization({name: 'ln'});
  const proj = L.dense({name: 'proj', units: 6, activation: 'relu'});
  const ya = proj.apply(ln.apply(bb.apply(a)));
  const yc = proj.apply(ln.apply(bb.apply(c)));
  const y = L.concatenate({name: 'cat'}).apply([ya, yc]);
  const o = L.dense({name: 'out', units: 1}).apply(y);
  return tfl.model({name: 'shared_bn', inputs: [a, c], outputs: o});
}

// Models the importer must refuse, one reason each, with the file, the
// JSON path and why (test_import_tfjs.c lists what it expects of each).
const refusals = {
  // Concatenate along rows: the trace's concat joins channels only.
  refuse_concat_rows: () => {
    const x = tfl.input({name: 'img', shape: [16, 16, 3]});
    const a = L.conv2d({name: 'a', filters: 4, kernelSize: 3,
                        padding: 'same'}).apply(x);
    const b = L.conv2d({name: 'b', filters: 4, kernelSize: 3,
                        padding: 'same'}).apply(x);
    const y = L.concatenate({name: 'rows', axis: 1}).apply([a, b]);
    const o = L.dense({name: 'out', units: 2})
                  .apply(L.flatten({name: 'f'}).apply(y));
    return tfl.model({name: 'refuse_concat_rows', inputs: x, outputs: o});
  },
  // Regularisers a CNN user adds for training: noise layers, no trace op.
  refuse_noise: () => {
    const m = tfl.sequential({name: 'refuse_noise'});
    m.add(L.gaussianNoise({name: 'noise', inputShape: [16, 16, 3],
                           stddev: 0.1}));
    m.add(L.conv2d({name: 'c', filters: 4, kernelSize: 3,
                    activation: 'selu'}));
    m.add(L.gaussianDropout({name: 'gdrop', rate: 0.1}));
    m.add(L.flatten({name: 'f'}));
    m.add(L.alphaDropout({name: 'adrop', rate: 0.1}));
    m.add(L.dense({name: 'out', units: 2}));
    return m;
  },
  // Dense on a channels-first feature map acts on its last axis, the
  // columns, not the channels.
  refuse_cf_dense: () => {
    const m = tfl.sequential({name: 'refuse_cf_dense'});
    m.add(L.conv2d({name: 'c', inputShape: [3, 16, 16], filters: 4,
                    kernelSize: 3, dataFormat: 'channelsFirst'}));
    m.add(L.dense({name: 'out', units: 2}));
    return m;
  },
};

// Channels-first, as a model ported from PyTorch or Theano is saved: the
// importer reads each tensor's channels from axis 1 (test_import_tfjs.c
// compares tfjs's shapes with the channels moved last).
const channelsFirst = {
  // Sequential: the input's layout is its first layer's.
  chfirst_seq: () => {
    const m = tfl.sequential({name: 'chfirst_seq'});
    m.add(L.conv2d({name: 'c', inputShape: [3, 16, 16], filters: 4,
                    kernelSize: 3, dataFormat: 'channelsFirst'}));
    m.add(L.batchNormalization({name: 'bn', axis: 1}));
    m.add(L.maxPooling2d({name: 'p', poolSize: 2,
                          dataFormat: 'channelsFirst'}));
    m.add(L.flatten({name: 'f'}));
    m.add(L.dense({name: 'out', units: 2}));
    return m;
  },
  // Every 2D layer with a data_format, batchnorm on axis 1, and
  // squeeze-excite with its gate reshaped to (C, 1, 1).
  chfirst_cnn: () => {
    const cf = 'channelsFirst';
    const x = tfl.input({name: 'img', shape: [3, 32, 32]});
    let y = L.conv2d({name: 'stem', filters: 16, kernelSize: 3,
                      padding: 'same', dataFormat: cf, activation: 'relu'})
                .apply(x);
    y = L.batchNormalization({name: 'bn', axis: 1}).apply(y);
    y = L.maxPooling2d({name: 'pool', poolSize: 2, dataFormat: cf}).apply(y);
    y = L.zeroPadding2d({name: 'pad', padding: [[1, 0], [2, 1]],
                         dataFormat: cf}).apply(y);
    y = L.depthwiseConv2d({name: 'dw', kernelSize: 3, depthMultiplier: 2,
                           dataFormat: cf}).apply(y);
    y = L.separableConv2d({name: 'sep', filters: 24, kernelSize: 3,
                           padding: 'same', dataFormat: cf}).apply(y);
    let s = L.globalAveragePooling2d({name: 'se_gap', dataFormat: cf})
                .apply(y);
    s = L.dense({name: 'se_reduce', units: 6, activation: 'relu'}).apply(s);
    s = L.dense({name: 'se_expand', units: 24, activation: 'sigmoid'})
            .apply(s);
    s = L.reshape({name: 'se_reshape', targetShape: [24, 1, 1]}).apply(s);
    y = L.multiply({name: 'se_mul'}).apply([y, s]);
    y = L.conv2dTranspose({name: 'deconv', filters: 8, kernelSize: 3,
                           strides: 2, padding: 'same', dataFormat: cf})
            .apply(y);
    y = L.upSampling2d({name: 'up', size: [2, 1], dataFormat: cf}).apply(y);
    y = L.cropping2D({name: 'crop', cropping: [[2, 2], [1, 0]],
                      dataFormat: cf}).apply(y);
    y = L.averagePooling2d({name: 'avg', poolSize: 2, dataFormat: cf})
            .apply(y);
    y = L.flatten({name: 'flat'}).apply(y);
    const o = L.dense({name: 'out', units: 10}).apply(y);
    return tfl.model({name: 'chfirst_cnn', inputs: x, outputs: o});
  },
  // A 3D U-Net on a one-channel CT volume, Input((1, D, H, W)): Conv3D,
  // batchnorm and Concatenate on axis 1, MaxPooling3D, Conv3DTranspose up
  // (tfjs-layers 4.22.0 has no UpSampling3D), a 1x1x1 sigmoid head.
  chfirst_unet3d: () => {
    const cf = 'channelsFirst';
    const x = tfl.input({name: 'volume', shape: [1, 16, 16, 16]});
    const block = (t, name, filters) => {
      t = L.conv3d({name: name + '_conv', filters, kernelSize: 3,
                    padding: 'same', useBias: false, dataFormat: cf})
              .apply(t);
      t = L.batchNormalization({name: name + '_bn', axis: 1}).apply(t);
      return L.activation({name: name + '_relu', activation: 'relu'})
          .apply(t);
    };
    const e1 = block(x, 'enc1', 8);
    const p1 = L.maxPooling3d({name: 'pool1', poolSize: 2, dataFormat: cf})
                   .apply(e1);
    const e2 = block(p1, 'enc2', 16);
    const p2 = L.maxPooling3d({name: 'pool2', poolSize: 2, dataFormat: cf})
                   .apply(e2);
    const b = block(p2, 'bottom', 32);
    let u = L.conv3dTranspose({name: 'up2', filters: 16, kernelSize: 2,
                               strides: 2, dataFormat: cf}).apply(b);
    let d = block(L.concatenate({name: 'cat2', axis: 1}).apply([u, e2]),
                  'dec2', 16);
    u = L.conv3dTranspose({name: 'up1', filters: 8, kernelSize: 2,
                           strides: 2, dataFormat: cf}).apply(d);
    d = block(L.concatenate({name: 'cat1', axis: 1}).apply([u, e1]),
              'dec1', 8);
    const o = L.conv3d({name: 'mask', filters: 1, kernelSize: 1,
                        activation: 'sigmoid', dataFormat: cf}).apply(d);
    return tfl.model({name: 'chfirst_unet3d', inputs: x, outputs: o});
  },
};

// Layers tfjs writes that have no trace op: the importer must refuse the
// file and list each of these classes.
function unmapped() {
  const x = tfl.input({name: 'img', shape: [16, 16, 3]});
  let y = L.conv2d({name: 'c', filters: 4, kernelSize: 3}).apply(x);
  y = L.thresholdedReLU({name: 'thr', theta: 0.5}).apply(y);
  y = L.permute({name: 'perm', dims: [2, 1, 3]}).apply(y);
  y = L.flatten({name: 'f'}).apply(y);
  y = L.repeatVector({name: 'rep', n: 4}).apply(y);
  // The orthogonal default initializer throws in tfjs-layers 4.22.0
  // ("rMat.flatten is not a function"); the config is all that is kept.
  y = L.lstm({name: 'lstm', units: 8,
              recurrentInitializer: 'glorotUniform'}).apply(y);
  const o = L.dense({name: 'out', units: 2}).apply(y);
  return tfl.model({name: 'unmapped', inputs: x, outputs: o});
}

// Per layer, per call: the output shape tfjs computed (batch as null).
// A model used as a layer is followed by its own layers, named
// OUTER/INNER as the importer names them.
function shapes(m, prefix = '') {
  return m.layers.flatMap((l) => [{
    name: prefix + l.name,
    class_name: l.getClassName(),
    // One output per call in these models: its shape.
    output_shapes: l.inboundNodes.map((n) => n.outputShapes.length === 1 &&
                                          Array.isArray(n.outputShapes[0]) ?
                                          n.outputShapes[0] : n.outputShapes),
  }].concat(l instanceof tfl.LayersModel ?
                shapes(l, prefix + l.name + '/') : []));
}

// The info file one layer a line, so that a diff after regenerating reads
// layer by layer.
function stable(info) {
  const head = Object.assign({}, info);
  delete head.layers;
  const h = JSON.stringify(head, null, 1);
  return h.slice(0, -2) + ',\n "layers": [\n  ' +
         info.layers.map((l) => JSON.stringify(l)).join(',\n  ') +
         '\n ]\n}\n';
}

async function write(name, m) {
  // What is written must be the model: one tfjs rebuilds from its config
  // with the same parameters (a key tfjs leaves out would otherwise make
  // the fixture disagree with its own file).
  const again = await tfl.models.modelFromJSON(
      {modelTopology: JSON.parse(m.toJSON(null, true))});
  if (again.countParams() !== m.countParams())
    throw new Error(`${name}: ${m.countParams()} parameters, but ` +
                    `${again.countParams()} once reloaded from its config`);
  fs.writeFileSync(path.join(OUT, name + '.json'),
                   JSON.stringify(JSON.parse(m.toJSON(null, true))) + '\n');
  let artifacts = null;
  await m.save(tf.io.withSaveHandler(async (a) => {
    artifacts = a;
    return {modelArtifactsInfo: {dateSaved: new Date(0),
                                 modelTopologyType: 'JSON'}};
  }));
  // model.json as tfjs's own file and http handlers write it.
  const mj = {
    modelTopology: artifacts.modelTopology,
    format: artifacts.format,
    generatedBy: artifacts.generatedBy,
    convertedBy: artifacts.convertedBy,
    weightsManifest: [{paths: [name + '.weights.bin'],
                       weights: artifacts.weightSpecs}],
  };
  fs.writeFileSync(path.join(OUT, name + '.model.json'),
                   JSON.stringify(mj) + '\n');
  const info = {
    producer: 'TensorFlow.js tfjs-layers ' + tfl.version_layers,
    model: m.name,
    class_name: m.getClassName(),
    count_params: m.countParams(),
    trainable_params: m.trainableWeights.reduce(
        (s, w) => s + w.shape.reduce((p, d) => p * d, 1), 0),
    layers: shapes(m),
  };
  fs.writeFileSync(path.join(OUT, name + '.tfjs.json'), stable(info));
  console.log(`${name}: ${m.layers.length} layers, ` +
              `${info.count_params} parameters`);
}

async function main() {
  await tf.setBackend('cpu');
  fs.mkdirSync(OUT, {recursive: true});
  const models = {seq_cnn: seqCnn, res_block: resBlock, ops_block: opsBlock,
                  conv1d: conv1d, conv3d: conv3d, inception: inception,
                  xception: xception, unet: unet, convnext: convnext,
                  heads: heads, seq_dense: seqDense, patches: patches,
                  odd_sizes: oddSizes, two_inputs: twoInputs,
                  shared_bn: sharedBn, spatial_gate: spatialGate,
                  ...channelsFirst,
                  unmapped: unmapped, ...refusals};
  for (const [name, build] of Object.entries(models))
    await write(name, build());
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
