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
function shapes(m) {
  return m.layers.map((l) => ({
    name: l.name,
    class_name: l.getClassName(),
    // One output per call in these models: its shape.
    output_shapes: l.inboundNodes.map((n) => n.outputShapes.length === 1 &&
                                          Array.isArray(n.outputShapes[0]) ?
                                          n.outputShapes[0] : n.outputShapes),
  }));
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
                  conv1d: conv1d, conv3d: conv3d, unmapped: unmapped};
  for (const [name, build] of Object.entries(models))
    await write(name, build());
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
