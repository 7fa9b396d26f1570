#pragma once
// The doctor's checks by area (doctor.h); each appends its findings to the report.
// Private to src/doctor. Thread-compatible.

#include <string>

#include "doctor/doctor.h"

namespace gpuslice::doctor {

// doctor.cc: whether glibc version `a` ("2.31") is older than `b` ("2.34").
bool OlderGlibc(const std::string& a, const std::string& b);

// checks_gpu.cc
void CheckDriver(const Options& o, Report& r, std::string* module_version);
void CheckGpus(const Options& o, Report& r, const std::string& module_version);
void CheckInterposerGlibc(Report& r);

// checks_host.cc
void CheckDeviceNodes(const Options& o, Report& r);
void CheckCgroup(const Options& o, Report& r);
void CheckExecStub(Report& r);
void CheckConfig(const Options& o, Report& r);
void CheckStateDir(const Options& o, Report& r);
void CheckSocket(const Options& o, Report& r);
void CheckClock(Report& r);
void CheckSlurm(const Options& o, Report& r);

}  // namespace gpuslice::doctor
