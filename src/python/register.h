// The parts of the kvtier Python module, each registering its functions and
// classes on the module (module.cc calls them in order).
#ifndef KVTIER_PYTHON_REGISTER_H_
#define KVTIER_PYTHON_REGISTER_H_

#include <pybind11/pybind11.h>

namespace kvtier::python {

void RegisterLayout(pybind11::module_& m);  // Layout, TensorInfo, layout_signature
void RegisterKeys(pybind11::module_& m);    // block_keys, KeyChain, KeySequence
void RegisterCodec(pybind11::module_& m);   // encode_block, decode_block
void RegisterCache(pybind11::module_& m);   // Cache

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_REGISTER_H_
