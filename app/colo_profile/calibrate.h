#pragma once
// colo-profile calibrate (calibrate.cpp).
#include <string>
#include <vector>

namespace colo::app {

/// `colo-profile calibrate --runs PATH [--gpu NAME] [--out FILE]`; returns the exit code.
int calibrate(const std::vector<std::string>& argv);

}  // namespace colo::app
