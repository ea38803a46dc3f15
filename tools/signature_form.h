// The form of a layout signature (docs/layouts.md, "Signature"), checked
// where a user types one in (`kvtier key --signature`): a typo or a made-up
// string would otherwise give keys no cache ever holds, silently.
//
// Thread safety: a pure function.
#ifndef KVTIER_TOOLS_SIGNATURE_FORM_H_
#define KVTIER_TOOLS_SIGNATURE_FORM_H_

#include <cstdint>
#include <string_view>

#include "kvtier/status.h"

namespace kvtier::cli {

// The block size a well-formed signature states (its `bt=`), or
// InvalidArgument saying where it departs from the grammar: the
// "kvtier-layout-v1" prefix, runs numbered from 0 without gaps, names,
// dtypes, decimal numbers without leading zeros, "L<i>-<j>" only for
// j > i, and maximal runs (two neighbours never equal), so that only the
// one string ModelLayout::Signature() would print passes.
Result<uint32_t> CheckSignatureForm(std::string_view signature);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_SIGNATURE_FORM_H_
