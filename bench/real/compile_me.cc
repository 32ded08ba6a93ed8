// A C++ translation unit for the real-program benchmark (bench/real_programs.py):
// g++ -O2 -c compiles it under each allocator and the object files are compared.
// It is never linked or run; it exists to make the compiler allocate the way real
// C++ makes it: the standard containers, string streams, std::variant visitors,
// std::function, and templates instantiated over several types. (No <regex>: one
// regex_match alone costs cc1plus about 2.5 s at -O2, more than this benchmark's
// budget for the whole file.)
// -DBRISK_REAL_QUICK leaves out the explicit instantiations and report(), which
// instantiates the rest (the benchmark's --quick size).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

namespace real {

struct Record {
  std::string host;
  std::string kind;
  int level = 0;
  std::int64_t at = 0;
  std::vector<std::string> words;
};

using Value = std::variant<std::monostate, bool, std::int64_t, double, std::string,
                           std::vector<std::int64_t>>;

struct Describe {
  std::string operator()(std::monostate) const { return "null"; }
  std::string operator()(bool b) const { return b ? "true" : "false"; }
  std::string operator()(std::int64_t i) const { return std::to_string(i); }
  std::string operator()(double d) const { return std::to_string(d); }
  std::string operator()(const std::string& s) const { return '"' + s + '"'; }
  std::string operator()(const std::vector<std::int64_t>& v) const {
    std::string out = "[";
    for (auto x : v) out += std::to_string(x) + ",";
    return out + "]";
  }
};

std::string describe(const Value& v) { return std::visit(Describe{}, v); }

std::optional<Record> parse_line(const std::string& line) {
  std::istringstream in(line);
  Record r;
  std::string kind, level, at;
  if (!(in >> r.host >> kind >> level >> at) || kind.size() < 3 || level.size() != 7 ||
      at.size() < 4)
    return std::nullopt;
  r.kind = kind.substr(1, kind.size() - 2);
  r.level = level[6] - '0';
  r.at = std::stoll(at.substr(3));
  for (std::string w; in >> w;) r.words.push_back(w);
  return r;
}

std::vector<std::string> find_users(const std::string& text) {
  std::vector<std::string> found;
  for (auto at = text.find("user"); at != std::string::npos; at = text.find("user", at + 4)) {
    auto end = text.find_first_not_of("0123456789", at + 4);
    auto digits = (end == std::string::npos ? text.size() : end) - (at + 4);
    if (digits >= 3 && digits <= 5) found.push_back(text.substr(at + 4, digits));
  }
  return found;
}

std::string redact(const std::string& text) {
  for (const char* key : {"password=", "token="}) {
    auto at = text.find(key);
    if (at != std::string::npos) return text.substr(0, at) + key + "***";
  }
  return text;
}

std::map<std::string, std::map<std::string, int>> by_host_kind(const std::vector<Record>& rs) {
  std::map<std::string, std::map<std::string, int>> out;
  for (const auto& r : rs) ++out[r.host][r.kind];
  return out;
}

std::unordered_map<std::string, std::vector<const Record*>> index_words(
    const std::vector<Record>& rs) {
  std::unordered_map<std::string, std::vector<const Record*>> idx;
  for (const auto& r : rs)
    for (const auto& w : r.words) idx[w].push_back(&r);
  return idx;
}

std::vector<std::pair<std::string, std::size_t>> top_words(const std::vector<Record>& rs,
                                                           std::size_t n) {
  auto idx = index_words(rs);
  std::vector<std::pair<std::string, std::size_t>> v;
  for (const auto& [w, list] : idx) v.emplace_back(w, list.size());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (v.size() > n) v.resize(n);
  return v;
}

// A small pipeline of std::function stages over records.
struct Pipeline {
  std::vector<std::function<bool(Record&)>> stages;
  Pipeline& then(std::function<bool(Record&)> f) {
    stages.push_back(std::move(f));
    return *this;
  }
  std::vector<Record> run(std::vector<Record> in) const {
    std::vector<Record> out;
    for (auto& r : in) {
      bool keep = true;
      for (const auto& s : stages)
        if (!(keep = s(r))) break;
      if (keep) out.push_back(std::move(r));
    }
    return out;
  }
};

Pipeline default_pipeline() {
  Pipeline p;
  p.then([](Record& r) { return r.level > 0; })
      .then([](Record& r) {
        for (auto& w : r.words) w = redact(w);
        return true;
      })
      .then([](Record& r) { return !r.words.empty(); })
      .then([](Record& r) {
        std::sort(r.words.begin(), r.words.end());
        r.words.erase(std::unique(r.words.begin(), r.words.end()), r.words.end());
        return true;
      });
  return p;
}

// Templates instantiated over many types: statistics of any container of numbers,
// a typed table keyed by strings, and a compile-time fold over a tuple of them.
template <typename T>
struct Stats {
  T min{}, max{};
  double mean = 0;
  std::size_t count = 0;
};

template <typename Container>
Stats<typename Container::value_type> stats(const Container& c) {
  Stats<typename Container::value_type> s;
  if (c.empty()) return s;
  auto [lo, hi] = std::minmax_element(c.begin(), c.end());
  s.min = *lo;
  s.max = *hi;
  s.count = c.size();
  s.mean = std::accumulate(c.begin(), c.end(), 0.0) / static_cast<double>(c.size());
  return s;
}

template <typename T>
class Table {
 public:
  void put(const std::string& key, T value) { rows_[key].push_back(std::move(value)); }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (const auto& kv : rows_) k.push_back(kv.first);
    return k;
  }
  template <typename F>
  auto map(F f) const {
    Table<decltype(f(std::declval<const T&>()))> out;
    for (const auto& [key, values] : rows_)
      for (const auto& v : values) out.put(key, f(v));
    return out;
  }
  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& kv : rows_) n += kv.second.size();
    return n;
  }

 private:
  std::map<std::string, std::vector<T>> rows_;
};

template <typename... Ts>
std::size_t total_size(const std::tuple<Table<Ts>...>& tables) {
  return std::apply([](const auto&... t) { return (t.size() + ... + 0); }, tables);
}

template <int N>
struct Unrolled {
  template <typename T>
  static T sum(const std::vector<T>& v) {
    T acc{};
    for (std::size_t i = N; i < v.size(); i += N + 1) acc += v[i] * static_cast<T>(N);
    return acc + Unrolled<N - 1>::sum(v);
  }
};
template <>
struct Unrolled<0> {
  template <typename T>
  static T sum(const std::vector<T>& v) {
    return v.empty() ? T{} : v[0];
  }
};

#define REAL_INSTANTIATE(T)                                                       \
  template Stats<T> stats<std::vector<T>>(const std::vector<T>&);                \
  template Stats<T> stats<std::set<T>>(const std::set<T>&);                      \
  template class Table<T>;                                                       \
  template T Unrolled<24>::sum(const std::vector<T>&);                           \
  std::size_t tables_of_##T(const std::vector<T>& v) {                           \
    Table<T> t;                                                                  \
    for (std::size_t i = 0; i < v.size(); ++i) t.put(std::to_string(i % 7), v[i]); \
    auto doubled = t.map([](const T& x) { return static_cast<double>(x) * 2; }); \
    auto named = t.map([](const T& x) { return std::to_string(x); });           \
    return total_size(std::make_tuple(t, doubled, named));                       \
  }

#ifndef BRISK_REAL_QUICK
REAL_INSTANTIATE(int)
REAL_INSTANTIATE(double)

std::string report(const std::vector<std::string>& lines) {
  std::vector<Record> records;
  for (const auto& l : lines)
    if (auto r = parse_line(l)) records.push_back(std::move(*r));
  records = default_pipeline().run(std::move(records));
  std::ostringstream out;
  for (const auto& [host, kinds] : by_host_kind(records)) {
    out << host << ':';
    for (const auto& [kind, n] : kinds) out << ' ' << kind << '=' << n;
    out << '\n';
  }
  for (const auto& [w, n] : top_words(records, 10)) out << w << ' ' << n << '\n';
  std::vector<std::int64_t> ats;
  for (const auto& r : records) ats.push_back(r.at);
  auto s = stats(ats);
  out << describe(Value{s.min}) << ' ' << describe(Value{s.mean}) << ' '
      << describe(Value{ats}) << '\n';
  for (const auto& l : lines)
    for (const auto& u : find_users(l)) out << u << ' ';
  return out.str();
}
#endif

}  // namespace real
