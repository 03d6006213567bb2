// Lock annotations for Clang's thread-safety analysis (-Wthread-safety), in the style of
// Abseil's thread_annotations.h: which lock guards which data, which functions must be
// called with a lock held (REQUIRES) or without it (EXCLUDES), which take or let go of
// one.  A Clang build of the annotated targets checks them (allocator/CMakeLists.txt adds
// -Wthread-safety -Werror=thread-safety; tests/test_thread_safety.py builds that way);
// with GCC, or any compiler without the attributes, every macro expands to nothing.
// C and C++ alike (no C++-only syntax here).
//
// NO_THREAD_SAFETY_ANALYSIS turns the check off for one function: every use says why.
#ifndef LIFETIME_THREAD_ANNOTATIONS_H_
#define LIFETIME_THREAD_ANNOTATIONS_H_

#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(guarded_by)
#define LT_THREAD_ANNOTATION_(x) __attribute__((x))
#endif
#endif
#ifndef LT_THREAD_ANNOTATION_
#define LT_THREAD_ANNOTATION_(x)
#endif

// A type that is a lock ("mutex", "spin lock": the name is only for messages).
#define CAPABILITY(name) LT_THREAD_ANNOTATION_(capability(name))
// An RAII type that holds a lock from its constructor to its destructor.
#define SCOPED_CAPABILITY LT_THREAD_ANNOTATION_(scoped_lockable)

// Data read or written only with the lock held (PT_: the data a pointer points to).
#define GUARDED_BY(x) LT_THREAD_ANNOTATION_(guarded_by(x))
#define PT_GUARDED_BY(x) LT_THREAD_ANNOTATION_(pt_guarded_by(x))

// The caller holds the lock(s) / must not hold them (the function takes them).
#define REQUIRES(...) LT_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) LT_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) LT_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

// The function takes / lets go of the lock(s) (no argument, on a lock type's method: this).
#define ACQUIRE(...) LT_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define RELEASE(...) LT_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
// Takes the lock when it returns the first argument (true: a try-lock that succeeded).
#define TRY_ACQUIRE(...) LT_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// The lock is held from here on, as the code knows by other means (a thread-local flag
// set while it holds it): the analysis takes its word.
#define ASSERT_CAPABILITY(x) LT_THREAD_ANNOTATION_(assert_capability(x))

#define NO_THREAD_SAFETY_ANALYSIS LT_THREAD_ANNOTATION_(no_thread_safety_analysis)

#endif  // LIFETIME_THREAD_ANNOTATIONS_H_
