#pragma once
// Private to launch.cpp: the `if` / `elif` / `else` / `fi` blocks of a launch script, so that the branch
// the script takes is the one read (NVIDIA's scripts pick their fp8 flags and their data flags so).
#include <optional>
#include <string>
#include <vector>

namespace colo::planner::detail {

/// The value of a test as bash gives it, on a line whose variables are already substituted: `[[ A == B ]]`,
/// `[ A = B ]`, `!=`, `-z A`, `-n A`, the integer comparisons `-eq -ne -lt -le -gt -ge`, a leading `!`,
/// and such tests joined by `&&` and `||` (left to right, as bash does). Nothing when colo cannot tell:
/// a file test, a command, a glob, an undefined variable left as `$NAME`.
[[nodiscard]] std::optional<bool> shellCondition(const std::string& condition);

/// Follows a script's conditional blocks line by line. A branch whose test colo cannot evaluate is read
/// as before (as if taken), and so are its siblings; a branch whose test is known false, or that follows
/// a taken one, is skipped with everything nested in it. The body of a here-document is text, not
/// script. Nesting colo cannot follow (a `fi` without its `if`, an `if` never closed) marks the script
/// broken: the caller then reads every branch, as before.
class ShellBranches {
 public:
  /// Takes one line (its variables substituted where they are certain). Returns whether the line's own
  /// text is read: false for the lines of a skipped branch. The keyword lines (`if ...; then`, `else`,
  /// `fi`) are read where their block is.
  bool take(const std::string& line);
  /// Whether the lines now are in branches the script takes (or colo cannot rule out).
  [[nodiscard]] bool active() const { return m_frames.empty() || m_frames.back().active; }
  /// Whether every enclosing block's branch is known to be taken: an assignment here is certain.
  [[nodiscard]] bool certain() const;
  /// Whether the line opens or continues a block with a test (`if`, `elif`): its test is evaluated.
  [[nodiscard]] static bool isTest(const std::string& line);
  /// The script's blocks did not balance (checked once every line is taken).
  [[nodiscard]] bool broken() const { return m_broken || !m_frames.empty(); }

 private:
  struct Frame {
    bool parentActive = true;
    bool known = true;   // every test so far in this block could be evaluated
    bool taken = false;  // a branch so far was taken
    bool active = true;  // the lines now are read
  };
  void open(const std::optional<bool>& test);
  void next(const std::optional<bool>& test);  // elif; else is a test that always holds
  std::vector<Frame> m_frames;
  std::string m_heredocEnd;  // the word that ends the here-document under way; empty: none
  bool m_heredocTabs = false;  // <<-: the end word may be indented with tabs
  bool m_broken = false;
};

}  // namespace colo::planner::detail
