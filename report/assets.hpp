#pragma once
// The page's HTML skeleton, CSS and JS, compiled in from report/report.html, report.css, and
// report.js with timeline.js after it (report/CMakeLists.txt makes assets.cpp from them). They
// live as files, not string literals, so they can be read and edited as the HTML, CSS and
// JavaScript they are; compiling them in keeps the binary self-contained, as the page must be.
namespace parallax::report {

extern const char* const kPageHtml;  ///< with markers PARALLAX_TITLE, /*PARALLAX_CSS*/, PARALLAX_DATA, /*PARALLAX_JS*/
extern const char* const kPageCss;
extern const char* const kPageJs;

}  // namespace parallax::report
