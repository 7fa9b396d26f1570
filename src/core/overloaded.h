#pragma once
// The visitor idiom for std::visit over the variants of events, decisions and reasons:
//   std::visit(Overloaded{[](const A&) {...}, [](const B&) {...}}, v);
// Header-only; stateless.

namespace gpuslice {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
// clang 14 (the fuzz build) deduces no aggregate template arguments without this guide.
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace gpuslice
